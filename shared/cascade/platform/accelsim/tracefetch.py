"""A trace's instruction files from storage onto the node's disk for Accel-Sim: the seam between
the simulation and S3 (:func:`fetch_instruction_trace`, once per trace and node)."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import lzma
import os
import time
import uuid
from pathlib import Path
from typing import Any

import msgspec

from cascade.errors import ValidationError
from cascade.platform.accelsim.tracefiles import (
    kernel_number,
    kernel_stem,
    listed_ids,
    localize_kernelslist,
    refuse_timeline_trace,
)
from cascade.platform.keys import raw_prefix
from cascade.platform.storage import Storage
from cascade.traces.files import check_name

_COMPLETE = ".complete"


class InstructionTrace(msgspec.Struct, frozen=True, kw_only=True):
    """A trace's instruction files on local disk."""

    folder: str
    kernelslist: str
    """Path of kernelslist.g."""
    kernel_ids: list[int]
    """N of every ``kernel-N`` the kernelslist names, in launch order."""
    downloaded: bool = False
    """True when this call fetched the files (False: the node's cache had them)."""


def trace_cache_dir(data_path: Path) -> Path:
    """Instruction-trace cache under a service's data directory: ``{data_dir}/cache/traces``."""
    return Path(data_path) / "cache" / "traces"


async def fetch_instruction_trace(storage: Storage, trace_id: str, kind: str, cache_dir: Path) -> InstructionTrace:
    """The trace's ``kernel-N.traceg`` files (xz decompressed) and ``kernelslist.g`` in
    ``{cache_dir}/{trace_id}/{listing hash}/``, downloaded once per node."""
    refuse_timeline_trace(trace_id, kind)
    prefix = raw_prefix(trace_id)
    kernels: dict[str, Any] = {}
    lists: dict[str, Any] = {}
    raw_only: list[str] = []
    async for info in storage.list(prefix):
        name = info.key[len(prefix):]
        try:
            tf = check_name(name)
        except ValidationError:
            continue
        if tf.kind == "kernel":
            if ".traceg" in name:
                kernels[name] = info
            else:
                raw_only.append(name)
        elif tf.kind == "kernelslist":
            lists[name] = info
    if not kernels:
        if raw_only:
            raise ValidationError(
                f"trace {trace_id} has only raw .trace files ({raw_only[0]}, ...): Accel-Sim reads "
                "post-processed kernel-N.traceg files; run Accel-Sim's post-traces-processing on "
                "the trace folder and upload the .traceg files and kernelslist.g", field="model")
        raise ValidationError(f"trace {trace_id} has no instruction files (kernel-N.traceg) in "
                              f"s3 {prefix}: the accel-sim model cannot simulate it", field="model")
    listing = sorted(f"{k}:{v.size}:{v.etag}" for k, v in {**kernels, **lists}.items())
    digest = hashlib.sha256("\n".join(listing).encode()).hexdigest()[:16]
    root = Path(cache_dir) / trace_id
    folder = root / digest
    await asyncio.to_thread(root.mkdir, parents=True, exist_ok=True)
    lock_path = root / ".lock"
    fd = await asyncio.to_thread(os.open, str(lock_path), os.O_CREAT | os.O_RDWR, 0o644)
    downloaded = False
    try:
        await asyncio.to_thread(fcntl.flock, fd, fcntl.LOCK_EX)
        if not (folder / _COMPLETE).is_file():
            await asyncio.to_thread(folder.mkdir, parents=True, exist_ok=True)
            for name, info in sorted(kernels.items()):
                local = folder / (name.removesuffix(".xz"))
                await _download(storage, info.key, local, xz=name.endswith(".xz"))
            names = {kernel_stem(n): n.removesuffix(".xz") for n in kernels}
            listed = lists.get("kernelslist.g") or lists.get("kernelslist")
            if listed is not None:
                text = (await storage.get_bytes(listed.key)).decode(errors="replace")
                (folder / "kernelslist.g").write_text(localize_kernelslist(text, names))
            else:
                order = sorted(names.values(), key=kernel_number)
                (folder / "kernelslist.g").write_text("".join(f"{n}\n" for n in order))
            (folder / _COMPLETE).write_text(f"{time.time()}\n")
            downloaded = True
    finally:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    klist = folder / "kernelslist.g"
    ids = listed_ids(klist.read_text(errors="replace"))
    if not ids:
        raise ValidationError(f"{klist} names no kernel-N.traceg file", field="model")
    return InstructionTrace(folder=str(folder), kernelslist=str(klist), kernel_ids=ids,
                            downloaded=downloaded)


async def _download(storage: Storage, key: str, local: Path, *, xz: bool = False) -> None:
    tmp = local.with_name(f".{local.name}.{uuid.uuid4().hex[:8]}.part")
    dec = lzma.LZMADecompressor() if xz else None
    try:
        with tmp.open("wb") as fh:
            async for chunk in storage.get_stream(key):
                if dec is None:
                    await asyncio.to_thread(fh.write, chunk)
                    continue
                pending = chunk
                while pending:  # concatenated xz streams (as `xz` writes them) are one file
                    data = dec.decompress(pending)
                    if data:
                        await asyncio.to_thread(fh.write, data)
                    pending = b""
                    if dec.eof:
                        pending = dec.unused_data
                        dec = lzma.LZMADecompressor()
        os.replace(tmp, local)
    except lzma.LZMAError as exc:
        raise ValidationError(f"{key} is not valid xz: {exc}", field="model") from None
    finally:
        if tmp.exists():
            tmp.unlink()
