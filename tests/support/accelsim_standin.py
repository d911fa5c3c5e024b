"""A stand-in ``accel-sim.out`` that prints Accel-Sim's real output format at a realistic pace.

Invoked like the real binary: ``accel-sim.out -trace DIR/kernelslist.g -config gpgpusim.config
-config trace.config``. Like the real one it opens every ``-config`` file relative to its
working directory (one it cannot open: ``GPGPU-Sim ** ERROR: Cannot open config file '...'``,
exit 1), dumps the options in the real log's ``%-20s %20s # ...`` form (``-gpgpu_clock_domains``
included), then opens the ``-inter_config_file`` the options name, again relative to its
working directory (missing: ``Could not open configuration file X`` on stderr, exit 255, as
intersim's ``exit(-1)``). Then for every ``kernel-N.traceg`` in kernelslist.g it prints the
lines Accel-Sim prints (``Processing kernel``, ``launching kernel name: X uid: U``, chatter,
the statistics block ending in ``gpu_total_sim_rate``, then the cache, DRAM and L2 blocks
whose counters, as in the real simulator, add up over the whole run), sleeping between kernels.

Behaviour comes from comment lines in the gpgpusim.config it is given (ignored by the real
Accel-Sim), so one binary serves several GPU config folders:

- ``# standin-pace-s: 0.2``        seconds of "simulation" per kernel;
- ``# standin-mode: ok|crash|hang|exit`` with ``# standin-after: K`` (crash: SIGSEGV after K
  kernels; hang: sleep forever after K kernels, with a child process in its group; exit:
  exit 3 after K kernels);
- ``# standin-skip: 4,5``          kernel ids it does not simulate (prints nothing for them);
- ``# standin-chatty-lines: 1000`` chatter lines per kernel (``instruction buffer valid``);
- ``# standin-pids-dir: DIR``      write ``{pid}.pids`` (its pid and its child's) there;
- a ``kernel-N.traceg`` whose header says ``-binary version = V`` for a V it has no opcode table
  for (0, say): ``unsupported binary version: V`` and exit 0, as Accel-Sim's trace parser does;
- ``# standin-stamps: FILE``       append ``first WORKDIR TIME`` after the first output line and
  ``kernel WORKDIR UID TIME`` after each kernel's completion line (WORKDIR: its cwd's name).

Cycles are ``1000 * N + 282`` for ``kernel-N`` and instructions ``10516 * N``; the other
per-kernel figures are :func:`stats_of` N, so tests can check the results carry them.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path


def cycles_of(kernel_id: int) -> int:
    """Cycles the stand-in reports for kernel-N."""
    return 1000 * kernel_id + 282


DRAM_CHANNELS = 2


def stats_of(kernel_id: int) -> dict[str, float]:
    """What the stand-in reports for kernel-N alone: occupancy (%), L1D and L2 accesses and
    misses, DRAM commands and busy cycles per channel (its printed counters are running sums)."""
    n = kernel_id
    cycles = cycles_of(n)
    n_cmd = 2 * cycles
    return {"occupancy_pct": 20.0 + n, "l1d_accesses": 400 * n, "l1d_misses": 10 * n * (n % 5 + 1),
            "l2_accesses": 200 * n, "l2_misses": 20 * n * (n % 3 + 1), "dram_cmd": n_cmd,
            "dram_busy": 4 * round(n_cmd * 0.05 * (n % 4 + 1) / 4)}


def _standin_options(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        m = re.match(r"^#\s*standin-([a-z\-]+):\s*(.*?)\s*$", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def _sim_options(text: str) -> list[tuple[str, str]]:
    """``-option value`` pairs of a gpgpu-sim config (``#`` starts a comment, as in gpgpu-sim)."""
    out = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("-"):
            name, _, value = line.partition(" ")
            out.append((name, value.strip()))
    return out


#: ``-binary version`` values the stand-in has an opcode table for (as Accel-Sim's
#: trace_parser.cc: Kepler to Hopper); a kernel header with another makes it print
#: ``unsupported binary version: N`` and exit 0, having simulated nothing more, as Accel-Sim does.
SUPPORTED_BINARY_VERSIONS = {35, 37, 50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90}


def _binary_version(path: Path) -> int | None:
    try:
        with path.open() as fh:
            for _ in range(40):
                m = re.match(r"^-binary version = (-?\d+)", fh.readline())
                if m:
                    return int(m.group(1))
    except OSError:
        pass
    return None


def _kernel_name(path: Path) -> str:
    try:
        with path.open() as fh:
            for _ in range(40):
                line = fh.readline()
                m = re.match(r"^-kernel name = (\S+)", line)
                if m:
                    return m.group(1)
    except OSError:
        pass
    return f"_Z6kernel{path.stem}"


def _start(configs: list[Path], trace: Path | None) -> tuple[list[tuple[str, str]], dict[str, str]] | int:
    """Read the configs and the interconnect file (relative to the cwd), dump the options: the
    options and stand-in options, or the exit code Accel-Sim exits with."""
    out = sys.stdout
    w = out.write
    opts: dict[str, str] = {}
    sim_opts: list[tuple[str, str]] = []
    for cfg in configs:  # relative paths are relative to the working directory, as fopen's
        try:
            text = cfg.read_text()
        except OSError:
            sys.stderr.write(f"\n\nGPGPU-Sim ** ERROR: Cannot open config file '{cfg}'\n")
            sys.stderr.flush()
            return 1
        sim_opts += _sim_options(text)
        opts.update(_standin_options(text))
    w("GPGPU-Sim: Configuration options:\n\n")
    for name, value in sim_opts:
        w(f"{name:<20} {value:>20} # (stand-in)\n")
    w(f"{'-trace':<20} {str(trace):>20} # traces kernel filetraces kernel file directory\n")
    out.flush()
    if trace is None or not trace.is_file():
        w(f"GPGPU-Sim ** ERROR: cannot open trace file {trace}\n")
        out.flush()
        return 1
    icnt = dict(sim_opts).get("-inter_config_file")
    if icnt:
        try:
            Path(icnt).read_text()
        except OSError:
            out.flush()
            sys.stderr.write(f"Could not open configuration file {icnt}\n")
            sys.stderr.flush()
            return 255
    w("GPGPU-Sim uArch: performance model initialization complete.\n")
    out.flush()
    return sim_opts, opts


def _counter_blocks(cum: dict[str, int]) -> str:
    """The core cache, DRAM and L2 blocks Accel-Sim prints after a kernel (run-long counters)."""
    parts = ["\n========= Core cache stats =========\nL1I_cache:\n\tL1I_total_cache_accesses = 188\n",
             f"L1D_cache:\n\tL1D_cache_core[0]: Access = {cum['l1d_accesses']}, Miss = {cum['l1d_misses']}, "
             "Miss_rate = 0.250, Pending_hits = 0, Reservation_fails = 0\n",
             f"\tL1D_total_cache_accesses = {cum['l1d_accesses']}\n\tL1D_total_cache_misses = {cum['l1d_misses']}\n",
             "\tL1D_total_cache_pending_hits = 0\n\tL1D_total_cache_reservation_fails = 0\n"]
    for ch in range(DRAM_CHANNELS):
        n_cmd, busy = cum["dram_cmd"], cum["dram_busy"]
        parts += [f"Memory Partition {ch}: \nIn Dram Latency Queue (total = 0): \n",
                  f"DRAM[{ch}]: 16 bks, busW=4 BL=8 CL=12, tRRD=6 tCCD=2, tRCD=12 tRAS=28 tRP=12 tRC=40\n",
                  f"n_cmd={n_cmd} n_nop={n_cmd - busy} n_act=4 n_pre=2 n_ref_event=0 n_req=4 n_rd=16 "
                  f"n_rd_L2_A=0 n_write=0 n_wr_bk=0 bw_util={busy / n_cmd:.4g}\n",
                  f"\nBW Util details:\nbwutil = {busy / n_cmd:.6f} \ntotal_CMD = {n_cmd} \nutil_bw = {busy} \n",
                  f"\nCommands details: \ntotal_CMD = {n_cmd} \nn_nop = {n_cmd - busy} \n"]
    parts += ["\n========= L2 cache stats =========\n",
              f"L2_cache_bank[0]: Access = {cum['l2_accesses']}, Miss = {cum['l2_misses']}, Miss_rate = 0.100, "
              "Pending_hits = 0, Reservation_fails = 0\n",
              f"L2_total_cache_accesses = {cum['l2_accesses']}\nL2_total_cache_misses = {cum['l2_misses']}\n",
              f"L2_total_cache_miss_rate = {cum['l2_misses'] / cum['l2_accesses']:.4f}\n",
              "L2_total_cache_pending_hits = 0\nL2_total_cache_reservation_fails = 0\n",
              "icnt_total_pkts_mem_to_simt=48\nicnt_total_pkts_simt_to_mem=27\n"]
    return "".join(parts)


def main(argv: list[str]) -> int:
    trace, configs = None, []
    i = 0
    while i < len(argv):
        if argv[i] == "-trace":
            trace = Path(argv[i + 1])
            i += 2
        elif argv[i] == "-config":
            configs.append(Path(argv[i + 1]))
            i += 2
        else:
            i += 1
    out = sys.stdout
    w = out.write
    w("GPGPU-Sim version 4.2.0 (build gpgpu-sim-modified) configured with AccelWattch.\n")
    out.flush()
    first_line_at = time.time()
    w("setup_environment succeeded\nAccel-Sim [build accelsim-commit-standin]\n\n")
    w("        *** GPGPU-Sim Simulator Version 4.2.0  [build standin] ***\n\n\n")
    out.flush()
    started = _start(configs, trace)
    if isinstance(started, int):
        return started
    sim_opts, opts = started
    pace = float(opts.get("pace-s", "0.2"))
    mode = opts.get("mode", "ok")
    after = int(opts.get("after", "1"))
    skip = {int(x) for x in opts.get("skip", "").split(",") if x.strip()}
    chatty = int(opts.get("chatty-lines", "20"))
    stamps = opts.get("stamps", "")
    if stamps:
        with open(stamps, "a") as fh:
            fh.write(f"first {Path.cwd().name} {first_line_at:.6f}\n")
    child = None
    if mode == "hang":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    if opts.get("pids-dir"):
        pids = [os.getpid()] + ([child.pid] if child else [])
        Path(opts["pids-dir"], f"{os.getpid()}.pids").write_text(" ".join(map(str, pids)))
    uid = 0
    done = 0
    tot_cycles = tot_insn = 0
    cum: dict[str, int] = {k: 0 for k in ("l1d_accesses", "l1d_misses", "l2_accesses", "l2_misses", "dram_cmd", "dram_busy")}
    for entry in trace.read_text().splitlines():
        entry = entry.strip()
        if not entry:
            continue
        if entry.startswith("Memcpy"):
            w(f"launching memcpy command : {entry}\n")
            continue
        m = re.match(r"^kernel-(\d+)", entry)
        if not m:
            continue
        kid = int(m.group(1))
        if kid in skip:
            continue
        if mode in ("crash", "hang", "exit") and done >= after:
            if mode == "crash":
                w("GPGPU-Sim uArch: ERROR ** deadlock detected: last writeback core 0 @ gpu_sim_cycle 0\n")
                out.flush()
                os.kill(os.getpid(), signal.SIGSEGV)
            if mode == "exit":
                w("GPGPU-Sim: ** ERROR: unsupported opcode in trace\n")
                out.flush()
                return 3
            out.flush()
            time.sleep(3600)
        path = trace.parent / entry
        name = _kernel_name(path)
        uid += 1
        w(f"Processing kernel {path}\n")
        w(f"Header info loaded for kernel command : {path}\n")
        version = _binary_version(path)
        if version is not None and version not in SUPPORTED_BINARY_VERSIONS:
            w(f"unsupported binary version: {version}\n")
            out.flush()
            return 0
        w(f"launching kernel name: {name} uid: {uid}\n")
        w(f"GPGPU-Sim uArch: Shader 0 bind to kernel {uid} '{name}'\n")
        w("GPGPU-Sim uArch: CTA/core = 2, limited by: threads\n")
        out.flush()
        step = pace / max(1, chatty)
        for j in range(chatty):
            w(f"instruction buffer valid: {j & 1}\n")
            if step >= 0.001:
                out.flush()
                time.sleep(step)
        if step < 0.001:
            time.sleep(pace)
        cycles, insn = cycles_of(kid), 10516 * kid
        st = stats_of(kid)
        tot_cycles += cycles
        tot_insn += insn
        for key in cum:
            cum[key] += st[key]
        w(f"Destroy streams for kernel {uid}: size 0\n")
        w(f"kernel_name = {name} \nkernel_launch_uid = {uid} \n")
        w(f"gpu_sim_cycle = {cycles}\ngpu_sim_insn = {insn}\ngpu_ipc = {insn / cycles:12.4f}\n")
        w(f"gpu_tot_sim_cycle = {tot_cycles}\ngpu_tot_sim_insn = {tot_insn}\n")
        w(f"gpu_tot_ipc = {tot_insn / tot_cycles:12.4f}\ngpu_tot_issued_cta = {uid}\n")
        w(f"gpu_occupancy = {st['occupancy_pct']:.4f}% \ngpu_tot_occupancy = {st['occupancy_pct']:.4f}% \n")
        w("max_total_param_size = 0\ngpu_stall_dramfull = 0\ngpu_stall_icnt2sh    = 0\n")
        w("L2_BW  =       0.5616 GB/Sec\nL2_BW_total  =       0.5616 GB/Sec\n")
        w(f"gpu_total_sim_rate={insn}\n")
        out.flush()
        if stamps:
            with open(stamps, "a") as fh:
                fh.write(f"kernel {Path.cwd().name} {uid} {time.time():.6f}\n")
        w(_counter_blocks(cum))
        done += 1
    w("gpgpu_simulation_time = 0 days, 0 hrs, 0 min, 1 sec (1 sec)\n")
    w("gpgpu_simulation_rate = 10516 (inst/sec)\n")
    w(f"gpgpu_simulation_rate = {tot_cycles} (cycle/sec)\ngpgpu_silicon_slowdown = 1253510x\n")
    w("GPGPU-Sim: *** simulation thread exiting ***\n")
    w("GPGPU-Sim: *** exit detected ***\n")
    out.flush()
    if child is not None:
        child.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
