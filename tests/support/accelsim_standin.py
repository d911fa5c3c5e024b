"""A stand-in ``accel-sim.out`` that prints Accel-Sim's real output format at a realistic pace.

Invoked like the real binary: ``accel-sim.out -trace DIR/kernelslist.g -config gpgpusim.config
-config trace.config``. It echoes the config's options (``-gpgpu_clock_domains`` included, as
the real option dump does), then for every ``kernel-N.traceg`` in kernelslist.g prints the
lines Accel-Sim prints (``Processing kernel``, ``launching kernel name: X uid: U``, chatter,
then the statistics block ending in ``gpu_total_sim_rate``), sleeping between kernels.

Behaviour comes from comment lines in the gpgpusim.config it is given (ignored by the real
Accel-Sim), so one binary serves several GPU config folders:

- ``# standin-pace-s: 0.2``        seconds of "simulation" per kernel;
- ``# standin-mode: ok|crash|hang|exit`` with ``# standin-after: K`` (crash: SIGSEGV after K
  kernels; hang: sleep forever after K kernels, with a child process in its group; exit:
  exit 3 after K kernels);
- ``# standin-skip: 4,5``          kernel ids it does not simulate (prints nothing for them);
- ``# standin-chatty-lines: 1000`` chatter lines per kernel (``instruction buffer valid``);
- ``# standin-pids-dir: DIR``      write ``{pid}.pids`` (its pid and its child's) there;
- ``# standin-stamps: FILE``       append ``first WORKDIR TIME`` after the first output line and
  ``kernel WORKDIR UID TIME`` after each kernel's completion line (WORKDIR: its cwd's name).

Cycles are ``1000 * N + 282`` for ``kernel-N`` and instructions ``10516 * N``, so tests can
check the results carry them.
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


def _options(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        m = re.match(r"^#\s*standin-([a-z\-]+):\s*(.*?)\s*$", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


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
    w("GPGPU-Sim: Configuration options:\n\n")
    if trace is None or not trace.is_file():
        w(f"GPGPU-Sim ** ERROR: cannot open trace file {trace}\n")
        out.flush()
        return 1
    opts: dict[str, str] = {}
    for cfg in configs:
        for line in cfg.read_text().splitlines():
            if line.startswith("-"):
                w(line + "\n")
        opts.update(_options(cfg))
    w(f"-trace               {trace} # traces kernel filetraces kernel file directory\n")
    w("GPGPU-Sim uArch: performance model initialization complete.\n")
    out.flush()
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
        w(f"Destroy streams for kernel {uid}: size 0\n")
        w(f"kernel_name = {name} \nkernel_launch_uid = {uid} \n")
        w(f"gpu_sim_cycle = {cycles}\ngpu_sim_insn = {insn}\ngpu_ipc = {insn / cycles:12.4f}\n")
        w(f"gpu_tot_sim_cycle = {cycles}\ngpu_tot_sim_insn = {insn}\n")
        w("gpu_occupancy = 20.6860% \nL2_BW  =       0.5616 GB/Sec\n")
        w(f"gpu_total_sim_rate={insn}\n")
        out.flush()
        if stamps:
            with open(stamps, "a") as fh:
                fh.write(f"kernel {Path.cwd().name} {uid} {time.time():.6f}\n")
        w("\n========= Core cache stats =========\nL1I_cache:\n\tL1I_total_cache_accesses = 188\n")
        done += 1
    w("gpgpu_simulation_time = 0 days, 0 hrs, 0 min, 1 sec (1 sec)\n")
    w("gpgpu_simulation_rate = 10516 (inst/sec)\nGPGPU-Sim: *** simulation thread exiting ***\n")
    w("GPGPU-Sim: *** exit detected ***\n")
    out.flush()
    if child is not None:
        child.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
