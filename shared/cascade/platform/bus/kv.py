"""Typed JetStream KV buckets: get/put/create/compare-and-set, scans and watches."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable
from typing import Any, Generic, TypeVar

import msgspec.json as msgspec_json
import nats
import nats.errors
import nats.js.errors
from nats.js.kv import KeyValue

from cascade.errors import BusUnavailableError, ConflictError
from cascade.platform.bus.consumer import BusStats
from cascade.platform.messages.base import codec, encode

T = TypeVar("T")



@dataclasses.dataclass(frozen=True, slots=True)
class KVEntry(Generic[T]):
    """A decoded KV value with its revision (for compare-and-set)."""

    key: str
    value: T
    revision: int


@dataclasses.dataclass(frozen=True, slots=True)
class KVChange(Generic[T]):
    """One update seen by :meth:`KV.watch`; ``value`` is None for a delete/purge."""

    key: str
    value: T | None
    revision: int


class KV:
    """Typed helpers over one JetStream KV bucket (values are msgspec JSON)."""

    def __init__(self, bucket: str, kv: KeyValue, stats: BusStats | None = None) -> None:
        self.bucket = bucket
        self.raw = kv
        self.stats = stats if stats is not None else BusStats()
        """Where the JetStream consumers behind scans and watches are counted."""

    async def get(self, key: str, type_: type[T]) -> KVEntry[T] | None:
        """The current value of ``key`` decoded as ``type_``, or None if absent/deleted."""
        try:
            entry = await self.raw.get(key)
        except nats.js.errors.KeyNotFoundError:
            return None
        return KVEntry(key, codec(type_).decode(entry.value or b"", what=f"{self.bucket}/{key}"),
                       entry.revision or 0)

    async def put(self, key: str, value: Any) -> int:
        """Write ``value`` (a Struct or JSON-able) unconditionally; returns the revision."""
        return await self.raw.put(key, _to_bytes(value))

    async def create(self, key: str, value: Any) -> int:
        """Write ``value`` only if ``key`` does not exist; :class:`ConflictError` otherwise."""
        try:
            return await self.raw.create(key, _to_bytes(value))
        except nats.js.errors.KeyWrongLastSequenceError:
            raise ConflictError(f"{self.bucket}/{key} already exists") from None

    async def update(self, key: str, value: Any, *, revision: int) -> int:
        """Write ``value`` only if ``key`` is still at ``revision``; :class:`ConflictError` otherwise."""
        try:
            return await self.raw.update(key, _to_bytes(value), last=revision)
        except nats.js.errors.KeyWrongLastSequenceError:
            raise ConflictError(f"{self.bucket}/{key} changed since revision {revision}") from None

    async def mutate(
        self,
        key: str,
        type_: type[T],
        change: Callable[[T | None], T | None],
        *,
        retries: int = 50,
    ) -> T | None:
        """Compare-and-set loop: ``change(current or None)`` -> new value (None: leave as is).

        Retried on a concurrent write (revision mismatch) up to ``retries`` times;
        ``change`` must be a pure function of its input. Returns the stored value.
        """
        for _ in range(retries):
            current = await self.get(key, type_)
            new = change(current.value if current else None)
            if new is None:
                return current.value if current else None
            try:
                if current is None:
                    await self.create(key, new)
                else:
                    await self.update(key, new, revision=current.revision)
                return new
            except ConflictError:
                await asyncio.sleep(0.001)
        raise ConflictError(f"{self.bucket}/{key}: gave up after {retries} concurrent updates")

    async def delete(self, key: str) -> None:
        """Delete ``key`` (a no-op if absent)."""
        with contextlib.suppress(nats.js.errors.KeyNotFoundError):
            await self.raw.delete(key)

    async def scan_raw(self, pattern: str = ">", *, meta_only: bool = False) -> dict[str, bytes]:
        """Current raw values of every live key matching ``pattern``, in one ordered pass.

        nats-py's watcher may signal "initial values done" before it has handed
        over entries the server already delivered (its check races with the
        delivery callback under load). An early end marker with nothing
        received is therefore confirmed against the stream's subject index
        before an empty answer is believed.
        """
        watcher = await self.raw.watch(pattern, ignore_deletes=True, meta_only=meta_only)
        self.stats.consumer_opened("kv-scan")
        out: dict[str, bytes] = {}
        timeout = 5.0
        try:
            while True:
                try:
                    entry = await watcher.updates(timeout=timeout)
                except (TimeoutError, nats.errors.TimeoutError):
                    break
                if entry is None:
                    if out or not await self._has_keys(pattern):
                        break
                    timeout = 1.0  # entries are on their way; a deleted-only set ends here
                    continue
                out[entry.key] = entry.value or b""
                if not entry.delta:
                    break
        finally:
            self.stats.consumer_closed("kv-scan")
            with contextlib.suppress(Exception):
                await watcher.stop()
        return out

    @contextlib.asynccontextmanager
    async def watch_raw(self, pattern: str = ">") -> AsyncIterator[Any]:
        """A raw nats-py watcher of ``pattern`` (current values, then a None marker, then
        changes with deletes), counted as one open ``kv-watch`` consumer until the block ends."""
        watcher = await self.raw.watch(pattern)
        self.stats.consumer_opened("kv-watch")
        try:
            yield watcher
        finally:
            self.stats.consumer_closed("kv-watch")
            with contextlib.suppress(Exception):
                await watcher.stop()

    async def last_revision(self) -> int:
        """The newest revision (stream sequence) written to the bucket: a watcher that has
        applied it has seen every write made before this call. One API request, no consumer."""
        raw: Any = self.raw
        info = await raw._js.stream_info(raw._stream)
        return int(info.state.last_seq or 0)

    async def purge(self, pattern: str) -> int:
        """Remove every value (and its history) of the keys matching ``pattern`` in one
        request, without a consumer and without delete markers; returns how many messages
        went. Watchers are not told: delete a key they follow afterwards."""
        raw: Any = self.raw
        js: Any = raw._js
        subject = f"{js._prefix}.STREAM.PURGE.{raw._stream}"
        reply = await js._nc.request(
            subject, msgspec_json.encode({"filter": f"{raw._pre}{pattern}"}), timeout=js._timeout)
        answer = msgspec_json.decode(reply.data)
        if "error" in answer:
            raise BusUnavailableError(f"{self.bucket}: purge of {pattern} failed: {answer['error']}")
        return int(answer.get("purged", 0))

    async def _has_keys(self, pattern: str) -> bool:
        """Whether the bucket's stream holds any message on a key matching ``pattern``."""
        raw: Any = self.raw
        info = await raw._js.stream_info(raw._stream, subjects_filter=f"{raw._pre}{pattern}")
        return bool(info.state.subjects)

    async def keys(self, pattern: str = ">") -> list[str]:
        """Keys matching a subject-style ``pattern`` (``>`` all, ``trace1.>``, ``*.state``)."""
        return sorted(await self.scan_raw(pattern, meta_only=True))

    async def values(self, type_: type[T], pattern: str = ">") -> dict[str, T]:
        """Every current value matching ``pattern``, decoded."""
        dec = codec(type_)
        found = await self.scan_raw(pattern)
        return {
            key: dec.decode(value, what=f"{self.bucket}/{key}")
            for key, value in sorted(found.items())
            if value
        }

    async def watch(
        self, type_: type[T], pattern: str = ">", *, initial: bool = True
    ) -> AsyncIterator[KVChange[T]]:
        """Yield changes to keys matching ``pattern`` (current values first when ``initial``)."""
        watcher = await self.raw.watch(pattern)
        self.stats.consumer_opened("kv-watch")
        dec = codec(type_)
        seen_initial = False
        try:
            async for entry in watcher:
                if entry is None:
                    seen_initial = True
                    continue
                if not initial and not seen_initial:
                    if not entry.delta:
                        seen_initial = True
                    continue
                if entry.operation in ("DEL", "PURGE"):
                    yield KVChange(entry.key, None, entry.revision or 0)
                else:
                    value = dec.decode(entry.value or b"", what=f"{self.bucket}/{entry.key}")
                    yield KVChange(entry.key, value, entry.revision or 0)
        finally:
            self.stats.consumer_closed("kv-watch")
            with contextlib.suppress(Exception):
                await watcher.stop()


def _to_bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    return encode(value)


class KVMirror(Generic[T]):
    """The current values of the keys matching ``pattern``, kept in memory by one watch
    (restarted when it fails): reads answer from memory and create no consumer; :meth:`sync`
    waits until every write made before it is in (one stream-info request)."""

    def __init__(self, kv: KV, type_: type[T], pattern: str = ">") -> None:
        self.kv = kv
        self.pattern = pattern
        self._dec = codec(type_)
        self._values: dict[str, T] = {}
        self._applied = 0
        self.version = 0
        """Bumped on every change (a cheap key for caches built from :meth:`values`)."""
        self._loaded = asyncio.Event()
        self._changed = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None

    async def start(self, timeout: float = 30.0) -> None:
        """Start the watch; returns once the current values are in."""
        self._task = asyncio.create_task(self._watch(), name=f"kv-mirror:{self.kv.bucket}")
        await asyncio.wait_for(self._loaded.wait(), timeout)

    async def stop(self) -> None:
        """Stop the watch (idempotent)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
            self._task = None

    def values(self) -> dict[str, T]:
        """Key -> current value (a copy)."""
        return dict(self._values)

    async def sync(self, timeout: float = 2.0) -> bool:
        """Wait (bounded) until every write made to the bucket before this call is applied."""
        target = await self.kv.last_revision()
        try:
            async with self._changed:
                await asyncio.wait_for(self._changed.wait_for(lambda: self._applied >= target),
                                       timeout)
        except TimeoutError:
            return False
        return True

    async def _watch(self) -> None:
        while True:
            try:
                async with self.kv.watch_raw(self.pattern) as watcher:
                    async for entry in watcher:
                        if entry is None:
                            self._loaded.set()
                        else:
                            self._apply(entry)
                        async with self._changed:
                            self._changed.notify_all()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - reconnects: watch again from the current values
                await asyncio.sleep(1.0)

    def _apply(self, entry: Any) -> None:
        self._applied = max(self._applied, int(entry.revision or 0))
        self.version += 1
        if entry.operation in ("DEL", "PURGE") or not entry.value:
            self._values.pop(entry.key, None)
            return
        try:
            self._values[entry.key] = self._dec.decode(entry.value, what=f"{self.kv.bucket}/{entry.key}")
        except Exception:  # noqa: BLE001 - an unreadable value is left out, the rest served
            self._values.pop(entry.key, None)

