"""`cascade bench ingest`: time from the last upload to bundle-ready on a real stack.

Starts ``nats-server`` and SeaweedFS in a temporary directory (the testbed's
:func:`~programs.embedded.testbed.embedded_servers`), runs the api, ingest and
prepare services in-process (:class:`~programs.embedded.testbed.InProcessStack`,
plus ``--workers - 1`` prepare worker processes), generates an xz trace of
``--kernels`` kernels, uploads it through the presigned flow one kernel at a
time (as the profiler streams it), and measures from the moment the last upload finished (its callback answered) to
the trace being ``ready`` in the api.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import lzma
import tempfile
import time
from pathlib import Path
from typing import Any

NAME = "ingest"
HELP = "time from the last upload to bundle-ready (target < 10 s) on a real NATS + SeaweedFS stack"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``cascade bench ingest``."""
    parser.add_argument("--kernels", type=int, default=200, help="kernels in the trace (default 200)")
    parser.add_argument("--blocks", type=int, default=16,
                        help="thread blocks per generated kernel (default 16)")
    parser.add_argument("--workers", type=int, default=2,
                        help="prepare workers: one in-process plus WORKERS-1 processes (default 2)")
    parser.add_argument("--timeout", type=float, default=300.0, help="give up after this many seconds")
    parser.add_argument("--log-level", default="warning", choices=("debug", "info", "warning", "error"),
                        help="log level of the in-process services (default warning)")


def _kernel_files(folder: Path, count: int, blocks: int) -> list[Path]:
    from cascade.traces.generate import TraceSpec, header_text, write_kernel

    spec = TraceSpec(grid=(blocks, 1, 1), block=(128, 1, 1), iterations=4)
    buf = io.StringIO()
    write_kernel(spec, buf)
    body = lzma.compress(buf.getvalue()[len(header_text(spec)):].encode(), preset=0)
    paths = []
    for kid in range(1, count + 1):
        head = header_text(TraceSpec(kernel_id=kid, name=f"_Z6kernel{kid}Pf", grid=spec.grid,
                                     block=spec.block, iterations=4)).encode()
        path = folder / f"kernel-{kid}.traceg.xz"
        path.write_bytes(lzma.compress(head, preset=0) + body)
        paths.append(path)
    listing = ["MemcpyHtoD,0x00007f3a00000000,4096", *(p.name for p in paths)]
    (folder / "kernelslist.g").write_text("\n".join(listing) + "\n")
    return paths


async def _bench(args: argparse.Namespace, base: Path) -> dict[str, float]:
    from programs.client import CascadeClient
    from programs.embedded.testbed import InProcessStack, embedded_servers

    # everything is stopped on the way out (a service failing to stop is no error here)
    async with embedded_servers(base / "servers", log_level=args.log_level, samples="false",
                                reconcile_interval_s="5") as settings, \
            InProcessStack.running(settings, "api", "ingest", "prepare", quiet=True,
                                   name="cascade-bench-ingest") as stack:
        token = settings.api_tokens[-1]
        for i in range(max(0, args.workers - 1)):
            stack.spawn("prepare", base / f"prepare-{i}.log")
        gen = base / "trace"
        gen.mkdir()
        t = time.perf_counter()
        paths = await asyncio.to_thread(_kernel_files, gen, args.kernels, args.blocks)
        gen_s = time.perf_counter() - t
        async with CascadeClient(stack.base, token) as api:  # /readyz answered 200 already
            trace = await api.create_trace(name="bench", source_gpu="SM90_H100")
            tid = trace["id"]
            started = time.perf_counter()
            await api.upload_files(tid, [gen / "kernelslist.g"])
            for path in paths:
                await api.upload_files(tid, [path])
            last_upload = time.perf_counter()
            await api.seal(tid)
            backlog = args.kernels - int((await api.get_trace(tid, details=False))["kernels_prepared"])
            all_prepared = None
            deadline = last_upload + args.timeout
            while True:
                ready = await api.get_trace(tid, details=False)
                now = time.perf_counter()
                if all_prepared is None and ready["kernels_prepared"] >= args.kernels:
                    all_prepared = now
                if ready["state"] in ("ready", "failed", "incomplete") or now > deadline:
                    break
                await asyncio.sleep(0.02)
            done = time.perf_counter()
        if ready["state"] != "ready":
            raise RuntimeError(f"trace ended {ready['state']}: {ready.get('errors') or ready.get('missing')}")
        total_bytes = sum(p.stat().st_size for p in paths)
        return {
            "kernels": float(ready["bundle_kernels"]),
            "trace_mb_compressed": total_bytes / 1e6,
            "generate_s": gen_s,
            "upload_s": last_upload - started,
            "last_upload_to_ready_s": done - last_upload,
            "first_upload_to_ready_s": done - started,
            "backlog_at_last_upload": float(backlog),
            "assembly_s": done - (all_prepared or done),
        }


def run(args: argparse.Namespace) -> int:
    """Start the stack, stream a generated trace in, print the figures."""
    with tempfile.TemporaryDirectory(prefix="cascade-bench-ingest-") as tmp:
        figures: dict[str, Any] = asyncio.run(_bench(args, Path(tmp)))
    print(f"kernels                      {figures['kernels']:.0f} "
          f"({figures['trace_mb_compressed']:.1f} MB xz, {args.workers} prepare workers)")
    print(f"upload (one file at a time)  {figures['upload_s']:.2f} s")
    print(f"first upload -> ready        {figures['first_upload_to_ready_s']:.2f} s")
    print(f"last upload -> bundle ready  {figures['last_upload_to_ready_s']:.2f} s   (target < 10 s)")
    print(f"  kernels still queued then  {figures['backlog_at_last_upload']:.0f}")
    print(f"  all prepared -> ready      {figures['assembly_s']:.2f} s (bundle assembly, upload, state flip)")
    return 0 if figures["last_upload_to_ready_s"] < 10.0 else 1
