"""An async HTTP client for the Cascade api (used by ``cascade import`` and tests).

::

    async with CascadeClient("http://127.0.0.1:8080", token="...") as api:
        trace = await api.create_trace(name="opt", source_gpu="SM90_H100")
        await api.upload_files(trace["id"], [Path("kernel-1.traceg")])
        await api.seal(trace["id"])
        ready = await api.wait_for_state(trace["id"], {"ready"}, timeout=60)

Uploads use the api's presigned URLs: a single PUT for small files, presigned
part URLs plus ``uploads/complete`` for big ones; file bodies are streamed
from disk with an optional progress callback. Error answers raise
:class:`ApiError` carrying the status and the JSON body.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, Self, TypeVar

import aiohttp
from yarl import URL

from cascade.errors import CascadeError
from cascade.platform.uploadlimits import MAX_UPLOAD_URLS, MIN_PART_SIZE, PART_URLS_PER_FILE

Progress = Callable[[int], None]
"""Called with the number of bytes just sent."""

CHUNK = 1024 * 1024
#: File next to an imported folder (or under ~/.cascade/) mapping (app, path) to its trace id,
#: written by `cascade import` and `cascade profile` so a re-import can resume.
IMPORT_STATE_NAME = ".cascade-import.json"

T = TypeVar("T")


class ApiError(CascadeError):
    """The api answered with an error status."""

    def __init__(self, status: int, body: Any, method: str, path: str) -> None:
        self.http_status = status
        self.body = body
        self.code = str(body.get("error", "http_error")) if isinstance(body, dict) else "http_error"
        message = body.get("message") if isinstance(body, dict) else str(body)
        self.message = " ".join(str(message).split())[:300]
        super().__init__(f"{method} {path} -> {status}: {self.message}")


class UploadError(CascadeError):
    """S3 refused a presigned upload (or could not be reached)."""

    def __init__(self, message: str, *, transient: bool = False) -> None:
        self.transient = transient
        """True when S3 could not be reached or answered 5xx (worth retrying)."""
        super().__init__(message)


class AppUnreachableError(CascadeError, ConnectionError):
    """The api could not be reached (refused, timed out, reset); one line naming the URL."""

    def __init__(self, url: str, reason: str, *, connect_failed: bool = False) -> None:
        self.url = url
        self.reason = reason
        self.connect_failed = connect_failed
        """True when no connection was made (the request never reached the app)."""
        super().__init__(f"cannot reach the Cascade app at {url} ({reason})")


def connection_reason(exc: BaseException, timeout: float | None = None) -> str:
    """A few words on why a connection failed ('connection refused', 'timed out after 5s')."""
    if isinstance(exc, TimeoutError | aiohttp.ServerTimeoutError):
        return f"timed out after {timeout:g}s" if timeout else "timed out"
    os_error = getattr(exc, "os_error", None)
    cause = os_error if isinstance(os_error, OSError) else exc
    if isinstance(cause, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "the server closed the connection"
    if isinstance(cause, OSError) and cause.strerror:
        return cause.strerror.lower()
    return str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__


def md5_etag(path: Path, part_size: int | None = None) -> str:
    """The ETag S3 gives ``path``: its MD5, or for multipart the MD5 of part MD5s plus ``-N``."""
    if part_size is None:
        h = hashlib.md5(usedforsecurity=False)
        with path.open("rb") as fh:
            while block := fh.read(CHUNK * 8):
                h.update(block)
        return h.hexdigest()
    digests = []
    with path.open("rb") as fh:
        while True:
            part = hashlib.md5(usedforsecurity=False)
            left = part_size
            while left > 0 and (block := fh.read(min(left, CHUNK * 8))):
                part.update(block)
                left -= len(block)
            if left == part_size:
                break
            digests.append(part.digest())
    return hashlib.md5(b"".join(digests), usedforsecurity=False).hexdigest() + f"-{len(digests)}"


async def _file_chunks(path: Path, start: int, length: int, progress: Progress | None) -> AsyncIterator[bytes]:
    with path.open("rb") as fh:
        fh.seek(start)
        left = length
        while left > 0:
            block = await asyncio.to_thread(fh.read, min(CHUNK, left))
            if not block:
                raise UploadError(f"{path} shrank while it was being uploaded")
            left -= len(block)
            if progress is not None:
                progress(len(block))
            yield block


#: Seconds `cascade import`'s client, once it has reached the app, keeps retrying through an
#: outage (the app or S3 restarting under `cascade up`) before it gives up.
RIDE_THROUGH_S = 60.0
#: Statuses that mean "not now" (a proxy or the app between restarts), retried like an outage.
RETRY_STATUSES = frozenset({502, 503, 504})


class CascadeClient:
    """One api endpoint, one aiohttp session.

    The first call fails fast (the app is not there: one clear error). With ``ride_through_s``
    (0: off, for callers with their own retries such as the profiler's uploader), once the app
    has answered, a refused connection, a dropped one or a 502/503/504 is retried with backoff for
    up to that many seconds; creating a trace is retried only when the request never
    reached the app (so no trace is made twice), presigned PUTs always (they are idempotent).
    """

    def __init__(self, base_url: str, token: str | None = None, *, timeout: float = 300.0,
                 ride_through_s: float = 0.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token or None
        self.timeout = aiohttp.ClientTimeout(total=timeout)
        self.ride_through_s = ride_through_s
        self.retries = 0
        """Calls retried through an outage so far."""
        self._reached = False
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Self:
        self._session = aiohttp.ClientSession(timeout=self.timeout)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the HTTP session (idempotent)."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        """The open session (enter the client with ``async with`` first)."""
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self.timeout)
        return self._session

    # -- plumbing ----------------------------------------------------------------------------
    async def request(self, method: str, path: str, *, json: Any = None,
                      params: dict[str, Any] | None = None) -> Any:
        """Call the api; the decoded JSON answer, or :class:`ApiError` (outages ridden through)."""
        return await self._riding(lambda: self._request_once(method, path, json=json, params=params),
                                  once=method == "POST" and path == "/api/traces")

    async def _riding(self, call: Callable[[], Awaitable[T]], *, once: bool = False) -> T:
        deadline: float | None = None
        delay = 0.25
        while True:
            try:
                result = await call()
                self._reached = True
                return result
            except (AppUnreachableError, ApiError, UploadError) as exc:
                transient = (
                    (isinstance(exc, ApiError) and exc.http_status in RETRY_STATUSES)
                    or (isinstance(exc, AppUnreachableError) and (exc.connect_failed or not once))
                    or (isinstance(exc, UploadError) and exc.transient)
                )
                if not (self._reached and transient and self.ride_through_s > 0):
                    raise
                now = time.monotonic()
                deadline = now + self.ride_through_s if deadline is None else deadline
                if now + delay > deadline:
                    raise
                self.retries += 1
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def _request_once(self, method: str, path: str, *, json: Any = None,
                            params: dict[str, Any] | None = None) -> Any:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        try:
            async with self.session.request(method, self.base_url + path, json=json,
                                            params=params, headers=headers) as resp:
                try:
                    body: Any = await resp.json(content_type=None)
                except (ValueError, aiohttp.ContentTypeError):
                    body = await resp.text()
                if resp.status >= 400:
                    raise ApiError(resp.status, body, method, path)
                return body
        except (TimeoutError, aiohttp.ClientConnectionError) as exc:
            raise AppUnreachableError(
                self.base_url, connection_reason(exc, self.timeout.total),
                connect_failed=isinstance(exc, aiohttp.ClientConnectorError)) from None

    # -- traces ------------------------------------------------------------------------------
    async def create_trace(self, *, name: str, source_gpu: str, kind: str = "instructions",
                           workload: str = "") -> dict[str, Any]:
        """POST /api/traces."""
        return dict(await self.request("POST", "/api/traces", json={
            "name": name, "source_gpu": source_gpu, "kind": kind, "workload": workload}))

    async def list_page(self, what: str, *, limit: int | None = None, cursor: str | None = None,
                        state: str | None = None, name: str = "") -> dict[str, Any]:
        """One page of GET /api/traces or /api/runs (``what``: traces, runs), newest first:
        ``{what: [...], "next_cursor", "total"}``."""
        if what not in ("traces", "runs"):
            raise ValueError(f"what: expected traces or runs, got {what!r}")
        params = {k: str(v) for k, v in (("limit", limit), ("cursor", cursor), ("state", state),
                                         ("name", name or None)) if v is not None}
        return dict(await self.request("GET", f"/api/{what}", params=params or None))

    async def list_all(self, what: str, *, state: str | None = None, name: str = "",
                       page_size: int = 1000) -> list[dict[str, Any]]:
        """Every entry of GET /api/traces or /api/runs matching the filters, page by page."""
        out: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            page = await self.list_page(what, limit=page_size, cursor=cursor, state=state,
                                        name=name)
            out += page[what]
            cursor = page.get("next_cursor")
            if not cursor:
                return out

    async def list_traces(self, *, state: str | None = None, name: str = "") -> list[dict[str, Any]]:
        """Every trace (GET /api/traces, every page), newest first."""
        return await self.list_all("traces", state=state, name=name)

    async def get_trace(self, trace_id: str, *, details: bool = True) -> dict[str, Any]:
        """GET /api/traces/{id}: record, files, kernels, progress (record only without details)."""
        params = None if details else {"details": "false"}
        return dict(await self.request("GET", f"/api/traces/{trace_id}", params=params))

    async def kernels(self, trace_id: str, *, offset: int = 0, limit: int = 100,
                      sort: str = "kernel_id", order: str = "asc") -> dict[str, Any]:
        """GET /api/traces/{id}/kernels."""
        return dict(await self.request("GET", f"/api/traces/{trace_id}/kernels", params={
            "offset": offset, "limit": limit, "sort": sort, "order": order}))

    async def delete_trace(self, trace_id: str) -> dict[str, Any]:
        """DELETE /api/traces/{id}."""
        return dict(await self.request("DELETE", f"/api/traces/{trace_id}"))

    async def request_uploads(self, trace_id: str, files: Iterable[tuple[str, int]]) -> dict[str, Any]:
        """POST /api/traces/{id}/uploads with ``(name, size)`` pairs, in as many requests as the
        api's bound on presigned URLs per request needs (:func:`upload_batches`), answered as one."""
        answer: dict[str, Any] = {}
        for batch in upload_batches(list(files)):
            part = dict(await self.request("POST", f"/api/traces/{trace_id}/uploads", json={
                "files": [{"name": n, "size": s} for n, s in batch]}))
            if not answer:
                answer = part
            else:
                answer["uploads"] = [*answer["uploads"], *part["uploads"]]
                answer["expires_in"] = min(answer["expires_in"], part["expires_in"])
        return answer

    async def report_uploaded(self, trace_id: str, name: str, etag: str = "") -> dict[str, Any]:
        """POST /api/traces/{id}/uploaded (the upload callback)."""
        return dict(await self.request("POST", f"/api/traces/{trace_id}/uploaded",
                                       json={"name": name, "etag": etag}))

    async def seal(self, trace_id: str, *, expected_files: list[str] | None = None,
                   expected_kernels: int | None = None,
                   skipped_files: dict[str, str] | None = None) -> dict[str, Any]:
        """POST /api/traces/{id}/seal (``skipped_files``: name -> why it is not in the trace)."""
        body: dict[str, Any] = {}
        if expected_files is not None:
            body["expected_files"] = expected_files
        if expected_kernels is not None:
            body["expected_kernels"] = expected_kernels
        if skipped_files:
            body["skipped_files"] = skipped_files
        return dict(await self.request("POST", f"/api/traces/{trace_id}/seal", json=body))

    async def wait_for_state(self, trace_id: str, states: set[str], *, timeout: float = 60.0,
                             interval: float = 0.1) -> dict[str, Any]:
        """Poll until the trace reaches one of ``states``; TimeoutError names the last state."""
        deadline = time.monotonic() + timeout
        while True:
            trace = await self.get_trace(trace_id, details=False)
            if trace["state"] in states:
                return await self.get_trace(trace_id)
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"trace {trace_id} still {trace['state']} after {timeout:g}s "
                    f"(prepared {trace.get('kernels_prepared')}/{trace.get('kernels_total')})"
                )
            await asyncio.sleep(interval)

    # -- uploads -----------------------------------------------------------------------------
    async def put_presigned(self, url: str, path: Path, *, start: int = 0, length: int | None = None,
                            progress: Progress | None = None) -> str:
        """PUT a byte range of ``path`` to a presigned URL; returns the ETag S3 answered (an S3
        outage is ridden through like the app's)."""
        return await self._riding(lambda: self._put_once(url, path, start=start, length=length,
                                                         progress=progress))

    async def _put_once(self, url: str, path: Path, *, start: int = 0, length: int | None = None,
                        progress: Progress | None = None) -> str:
        size = path.stat().st_size if length is None else length
        headers = {"Content-Length": str(size)}
        target = URL(url, encoded=True)
        try:
            async with self.session.put(target, headers=headers,
                                        data=_file_chunks(path, start, size, progress)) as resp:
                if resp.status >= 300:
                    text = " ".join((await resp.text()).split())
                    raise UploadError(f"S3 refused the upload of {path.name}: {resp.status} "
                                      f"{text[:300]}", transient=resp.status >= 500)
                return resp.headers.get("ETag", "").strip('"')
        except (TimeoutError, aiohttp.ClientConnectionError) as exc:
            raise UploadError(f"cannot upload {path.name}: S3 at {target.origin()} did not take "
                              f"it ({connection_reason(exc, self.timeout.total)})",
                              transient=True) from None

    async def upload_target(self, trace_id: str, target: dict[str, Any], path: Path,
                            progress: Progress | None = None) -> dict[str, Any]:
        """Upload one file as the api told (single PUT or multipart) and report it."""
        multipart = target.get("multipart")
        if multipart is None:
            etag = await self.put_presigned(target["url"], path, progress=progress)
            return await self.report_uploaded(trace_id, target["name"], etag)
        part_size = int(multipart["part_size"])
        parts = []
        for part in multipart["parts"]:
            n = int(part["part_number"])
            etag = await self.put_presigned(part["url"], path, start=(n - 1) * part_size,
                                            length=int(part["size"]), progress=progress)
            parts.append({"part_number": n, "etag": etag})
        return dict(await self.request("POST", f"/api/traces/{trace_id}/uploads/complete", json={
            "name": target["name"], "upload_id": multipart["upload_id"], "parts": parts}))

    async def upload_files(self, trace_id: str, paths: Iterable[Path],
                           progress: Progress | None = None) -> list[dict[str, Any]]:
        """Request presigned URLs for ``paths`` (named by file name), upload and report each."""
        files = [Path(p) for p in paths]
        if not files:
            return []
        answer = await self.request_uploads(trace_id, [(p.name, p.stat().st_size) for p in files])
        by_name = {p.name: p for p in files}
        return [
            await self.upload_target(trace_id, target, by_name[target["name"]], progress)
            for target in answer["uploads"]
        ]


def already_there(local: Path, remote: dict[str, Any] | None, part_size: int | None) -> bool:
    """True when the api holds ``local`` already (same size and ETag)."""
    if remote is None or remote.get("state") != "received":
        return False
    if int(remote.get("size", -1)) != local.stat().st_size:
        return False
    etag = str(remote.get("etag", ""))
    if "-" in etag:
        return part_size is not None and md5_etag(local, part_size) == etag
    return md5_etag(local) == etag


def upload_url_bound(size: int) -> int:
    """The most presigned URLs the api can answer a file of ``size`` bytes with, whatever its
    multipart threshold (at least S3's 5 MiB part): one PUT, or up to ``PART_URLS_PER_FILE`` parts."""
    if size < MIN_PART_SIZE:
        return 1
    return min(PART_URLS_PER_FILE, -(-size // MIN_PART_SIZE))


def upload_batches(files: list[tuple[str, int]]) -> list[list[tuple[str, int]]]:
    """``files`` in order, cut so no batch can need more than the api's ``MAX_UPLOAD_URLS``
    presigned URLs (one batch when they are few)."""
    batches: list[list[tuple[str, int]]] = [[]]
    used = 0
    for name, size in files:
        need = upload_url_bound(size)
        if batches[-1] and used + need > MAX_UPLOAD_URLS:
            batches.append([])
            used = 0
        batches[-1].append((name, size))
        used += need
    return batches
