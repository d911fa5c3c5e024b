"""A stand-in for the NVBit tracer (tests and ``cascade bench profile``): a process that
writes real-format Accel-Sim kernel traces into ``$TRACES_FOLDER`` over time, the way
``tracer_tool.so`` does, in the instruction pass only.

``python -m programs.profiler.standin --kernels N --interval S --log LOG`` writes
``kernel-1.trace`` .. ``kernel-N.trace`` (raw tracer format from
:mod:`cascade.traces.generate`), each in several flushed chunks, and appends each
finished kernel's line to ``kernelslist``; ``stats.csv`` last. It logs JSON lines
``{"event": "complete", "name", "t"}`` per finished file and ``{"event": "exit", "t"}``
(``time.time()``). ``--wait-for FILE --before K`` blocks before kernel K until FILE
exists (the tests use it to kill S3 while the tracer is still running). ``--sparse-mb M``
makes every kernel file M MiB: the real header and body, then a hole (zeros), cheap to
write; for memory figures, not for preparing.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
from pathlib import Path

from cascade.traces.generate import TraceSpec, header_text, kernel_file_name, write_kernel


def _log(path: Path | None, **event: object) -> None:
    if path is None:
        return
    with path.open("a") as fh:
        fh.write(json.dumps(event) + "\n")


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    p = argparse.ArgumentParser()
    p.add_argument("--kernels", type=int, default=10)
    p.add_argument("--interval", type=float, default=0.3, help="seconds per kernel file")
    p.add_argument("--blocks", type=int, default=2)
    p.add_argument("--chunks", type=int, default=4)
    p.add_argument("--log", type=Path, default=None)
    p.add_argument("--wait-for", type=Path, default=None)
    p.add_argument("--before", type=int, default=0)
    p.add_argument("--exit-code", type=int, default=0)
    p.add_argument("--hang", action="store_true",
                   help="stop half-way through the last kernel file and sleep until killed")
    p.add_argument("--sparse-mb", type=int, default=0, help="pad each kernel file to this size")
    args = p.parse_args(argv)
    folder = Path(os.environ["TRACES_FOLDER"])
    if os.environ.get("CASCADE_PROFILE_PASS") != "instructions":
        print("standin: not the instruction pass; nothing to trace", flush=True)
        return int(args.exit_code)
    folder.mkdir(parents=True, exist_ok=True)
    base = TraceSpec(grid=(args.blocks, 1, 1), block=(64, 1, 1), iterations=2, raw=True, compress=False)
    buf = io.StringIO()
    write_kernel(base, buf)
    body = buf.getvalue()[len(header_text(base)):].encode()
    listing = folder / "kernelslist"
    stats = ["kernel_id,kernel_name,grid_dim,block_dim"]
    for kid in range(1, args.kernels + 1):
        if args.wait_for is not None and kid == args.before:
            while not args.wait_for.exists():
                time.sleep(0.05)
        spec = TraceSpec(kernel_id=kid, name=f"_Z6kernel{kid}Pf", grid=base.grid, block=base.block,
                         iterations=base.iterations, raw=True, compress=False)
        name = kernel_file_name(spec)
        data = header_text(spec).encode() + body
        step = max(1, len(data) // args.chunks)
        last = kid == args.kernels
        with (folder / name).open("wb") as fh:
            for i in range(0, len(data), step):
                fh.write(data[i:i + step])
                fh.flush()
                time.sleep(args.interval / args.chunks)
                if args.hang and last:
                    while True:
                        time.sleep(1)
            if args.sparse_mb:
                fh.truncate(args.sparse_mb * 1024 * 1024)
        with listing.open("a") as fh:
            fh.write(f"{name}\n")
        _log(args.log, event="complete", name=name, t=time.time())
        stats.append(f"{kid},{spec.name},({args.blocks}:1:1),(64:1:1)")
    (folder / "stats.csv").write_text("\n".join(stats) + "\n")
    print(f"standin: wrote {args.kernels} kernels to {folder}", flush=True)
    _log(args.log, event="exit", t=time.time())
    return int(args.exit_code)


if __name__ == "__main__":
    sys.exit(main())
