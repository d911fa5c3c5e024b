"""A run's stored outputs in S3: each sim's result and kernels, its cached step model.

The documents themselves are defined in the domain (:mod:`cascade.runs.results`,
:mod:`cascade.runs.estimates`); the keys in :mod:`cascade.platform.keys`.
"""

from __future__ import annotations

import asyncio
import io

import msgspec

from cascade.errors import NotFoundError, StorageError
from cascade.kerneltable import KernelTable
from cascade.platform.keys import kernels_key, result_key, step_model_key
from cascade.platform.log import get_logger
from cascade.platform.state import SimRecord
from cascade.platform.storage import Storage
from cascade.runs.estimates import (
    RecordsLoader,
    StoredStepModel,
    fit_sim_step_model,
    sim_fingerprint,
)
from cascade.runs.results import SimResult, decode_result, encode_result, kernels_npz_bytes

log = get_logger("cascade.platform.runstore")


async def write_result(storage: Storage, result: SimResult, kernels: KernelTable) -> str:
    """Store ``kernels.npz`` then ``result.json`` (so a readable result always has its kernels).

    Returns the result key. Overwriting with a redone simulation is safe.
    """
    await storage.put_bytes(kernels_key(result.run_id, result.sim_id), kernels_npz_bytes(kernels))
    key = result_key(result.run_id, result.sim_id)
    await storage.put_bytes(key, encode_result(result))
    return key


async def read_result(storage: Storage, run_id: str, sim_id: str) -> SimResult:
    """Load a sim's result (NotFoundError if it was never written)."""
    key = result_key(run_id, sim_id)
    data = await storage.get_bytes(key, max_bytes=256 * 1024 * 1024)
    return decode_result(data, what=key)


async def read_kernels(storage: Storage, run_id: str, sim_id: str) -> KernelTable:
    """Load a sim's per-kernel table with predictions (NotFoundError if absent)."""
    key = kernels_key(run_id, sim_id)
    buf = io.BytesIO()
    try:
        async for chunk in storage.get_stream(key):
            buf.write(chunk)
    except NotFoundError:
        raise NotFoundError(f"no kernel results for sim {sim_id} of run {run_id} ({key})") from None
    buf.seek(0)
    return KernelTable.load_npz(buf)


async def load_cached(storage: Storage, run_id: str, sim_id: str) -> StoredStepModel | None:
    """The cached step model of a sim from S3, or None (absent or unreadable: refit)."""
    key = step_model_key(run_id, sim_id)
    try:
        data = await storage.get_bytes(key)
    except (NotFoundError, StorageError, FileNotFoundError):
        return None
    try:
        return msgspec.json.decode(data, type=StoredStepModel)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        log.warning("ignoring unreadable cached step model", key=key, error=str(exc))
        return None


async def save_cached(storage: Storage, stored: StoredStepModel) -> str:
    """Write the step model JSON to S3; returns the key."""
    key = step_model_key(stored.run_id, stored.sim_id)
    await storage.put_bytes(key, msgspec.json.encode(stored), content_type="application/json")
    return key


async def load_or_fit(storage: Storage, *, sim: SimRecord, trace_id: str, workload: str,
                      records: RecordsLoader) -> StoredStepModel:
    """The S3-cached model when its fingerprint matches the sim, else fit from ``records()``
    and cache it."""
    fp = sim_fingerprint(sim)
    cached = await load_cached(storage, sim.run_id, sim.id)
    if cached is not None and cached.fingerprint == fp:
        return cached
    recs = await records()
    # CPU-bound (a least-squares fit per step kind): off the event loop.
    stored = await asyncio.to_thread(fit_sim_step_model, recs, sim_id=sim.id, run_id=sim.run_id,
                                     trace_id=trace_id, config=sim.config, fingerprint=fp,
                                     workload=workload)
    try:
        await save_cached(storage, stored)
    except StorageError as exc:
        log.warning("could not cache step model", sim_id=sim.id, error=str(exc))
    return stored
