"""Local, content-addressed cache of prepared bundles.

A ready trace's bundle lives in S3 under ``bundles/{trace}/{hash}/`` (see
:attr:`cascade.platform.state.TraceRecord.bundle_key`). :func:`fetch_bundle` mirrors it
into ``{cache_dir}/{hash}/``, downloading only files that are missing or have
the wrong size, each streamed to a temporary name and renamed into place, so
concurrent fetchers (several simulators on one host) never see half a file.
Services use ``settings.data_path / "cache" / "bundles"`` as ``cache_dir``.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

from cascade.errors import ConflictError, NotFoundError
from cascade.kerneltable import KernelTable
from cascade.platform.state import TraceRecord
from cascade.platform.storage import Storage

#: File of the per-kernel columns inside a bundle directory.
KERNELS_FILE = "kernels.npz"
#: The bundle's manifest (written last when a bundle is stored).
MANIFEST_FILE = "manifest.json"


def cache_dir_for(data_path: Path) -> Path:
    """The bundle cache under a service's data directory: ``{data_dir}/cache/bundles``."""
    return Path(data_path) / "cache" / "bundles"


async def fetch_bundle(storage: Storage, trace_record: TraceRecord, cache_dir: str | os.PathLike[str]) -> Path:
    """A local directory holding the trace's ready bundle, downloading only what is missing.

    ``storage`` is a :class:`cascade.platform.storage.Storage`. Raises :class:`ConflictError`
    when the trace has no ready bundle and :class:`NotFoundError` when its objects
    are gone from S3.
    """
    if not trace_record.bundle_key or not trace_record.bundle_hash:
        raise ConflictError(
            f"trace {trace_record.id} has no bundle yet (state {trace_record.state})",
            state=trace_record.state,
        )
    prefix = trace_record.bundle_key if trace_record.bundle_key.endswith("/") else trace_record.bundle_key + "/"
    target = Path(cache_dir) / trace_record.bundle_hash
    await asyncio.to_thread(target.mkdir, parents=True, exist_ok=True)
    wanted = [info async for info in storage.list(prefix)]
    if not any(info.key == prefix + MANIFEST_FILE for info in wanted):
        raise NotFoundError(f"bundle s3://{storage.bucket}/{prefix} has no {MANIFEST_FILE}")
    for info in wanted:
        relative = info.key[len(prefix):]
        if not relative or relative.startswith("/") or ".." in relative.split("/"):
            continue
        local = target / relative
        if local.is_file() and local.stat().st_size == info.size:
            continue
        await _download(storage, info.key, local)
    return target


async def _download(storage: Storage, key: str, local: Path) -> None:
    local.parent.mkdir(parents=True, exist_ok=True)
    tmp = local.with_name(f".{local.name}.{uuid.uuid4().hex[:8]}.part")
    try:
        with tmp.open("wb") as fh:
            async for chunk in storage.get_stream(key):
                await asyncio.to_thread(fh.write, chunk)
        os.replace(tmp, local)
    finally:
        if tmp.exists():
            tmp.unlink()


def bundle_kernels(directory: str | os.PathLike[str]) -> KernelTable:
    """The per-kernel table of a local bundle directory."""
    path = Path(directory) / KERNELS_FILE
    if not path.is_file():
        raise NotFoundError(f"bundle directory {directory} has no {KERNELS_FILE}")
    return KernelTable.load_npz(path)
