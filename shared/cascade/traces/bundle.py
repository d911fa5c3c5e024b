"""Versioned, content-addressed trace bundles: ``manifest.json`` + ``kernels.npz``.

A bundle is built incrementally by :class:`BundleBuilder` as kernels arrive
(idempotent per kernel key; partial state persists as bytes so a restarted
worker continues) and finalised into ``(hash, manifest_bytes, npz_bytes)``.
The hash covers the sorted per-kernel part hashes and the manifest's
identifying fields, so the same kernels always give the same bundle id.
Pure functions over bytes and paths: storage is the caller's business.
"""

from __future__ import annotations

import hashlib
import io
import math
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from cascade.errors import ValidationError
from cascade.kerneltable import KernelTable
from cascade.traces.parse import KernelFeatures

FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"
KERNELS_NAME = "kernels.npz"
KINDS = ("instructions", "timeline", "both")


class BundleManifest(msgspec.Struct, frozen=True, kw_only=True):
    """What a bundle holds; stored as ``manifest.json``."""

    format_version: int = FORMAT_VERSION
    """bundle layout version"""
    trace_id: str
    """the trace this bundle was prepared from"""
    source_gpu: str
    """GPU spec id the trace was captured on"""
    workload: str = ""
    """free-text description of the workload"""
    kind: str = "instructions"
    """'instructions', 'timeline' or 'both'"""
    kernel_count: int = 0
    """rows in kernels.npz"""
    baseline: dict[str, float] = {}
    """measured timings on the source GPU (kernel_time_ns, span_ns, step_mean_ns:<kind>, ...)"""
    kernel_hashes_sha256: str = ""
    """sha256 over the sorted per-kernel part hashes"""
    files: dict[str, str] = {}
    """file name -> sha256 of its bytes"""
    warnings: list[str] = []
    """non-fatal findings from parsing (header fallbacks, unknown opcodes, ...)"""


class Bundle(msgspec.Struct, frozen=True, kw_only=True):
    """A loaded bundle: manifest plus columnar kernels."""

    hash: str
    """content address (see module docs)"""
    manifest: BundleManifest
    """the manifest"""
    kernels: KernelTable
    """one row per kernel"""


def _row_hash(row: Mapping[str, Any]) -> str:
    clean = {k: (None if isinstance(v, float) and math.isnan(v) else v)
             for k, v in sorted(row.items())}
    return hashlib.sha256(msgspec.json.encode(clean)).hexdigest()


class _State(msgspec.Struct, kw_only=True):
    trace_id: str
    source_gpu: str
    workload: str
    kind: str
    rows: dict[str, dict[str, Any]] = {}
    hashes: dict[str, str] = {}
    warnings: dict[str, list[str]] = {}
    timeline: list[dict[str, Any]] = []
    timeline_keys: list[str] = []


class BundleBuilder:
    """Accumulates per-kernel rows (and/or a timeline) into one bundle.

    ``add_kernel`` is idempotent per key: re-adding a kernel (a retried job)
    does not count twice. ``state_bytes`` / ``restore`` persist the partial
    bundle so another worker can continue it.
    """

    def __init__(self, *, trace_id: str, source_gpu: str, workload: str = "",
                 kind: str = "instructions") -> None:
        if kind not in KINDS:
            raise ValidationError(f"kind must be one of {', '.join(KINDS)}", field="kind")
        self._s = _State(trace_id=trace_id, source_gpu=source_gpu, workload=workload, kind=kind)

    # ---- input ------------------------------------------------------------------------------
    def add_kernel(self, key: str, row: Mapping[str, Any], warnings: Iterable[str] = ()) -> bool:
        """Add one kernel's KernelTable row under ``key``; False if the key was already added."""
        if key in self._s.rows:
            return False
        if "name" not in row:
            raise ValidationError("a kernel row needs a 'name'", field="name")
        clean = {k: (v.item() if hasattr(v, "item") else v) for k, v in row.items()}
        self._s.rows[key] = clean
        self._s.hashes[key] = _row_hash(clean)
        if warnings:
            self._s.warnings[key] = list(warnings)
        return True

    def add_features(self, features: KernelFeatures, key: str | None = None) -> bool:
        """Add a parsed kernel (key defaults to its file's base name)."""
        return self.add_kernel(key or Path(features.file).name, features.row, features.warnings)

    def add_timeline(self, table: KernelTable, key: str = "timeline") -> int:
        """Add a timeline table (idempotent per ``key``); returns rows added."""
        if key in self._s.timeline_keys:
            return 0
        self._s.timeline_keys.append(key)
        rows = list(table.rows())
        self._s.timeline.extend(rows)
        return len(rows)

    @property
    def kernel_count(self) -> int:
        """Instruction-trace kernels added so far."""
        return len(self._s.rows)

    def has(self, key: str) -> bool:
        """True if a kernel with this key was added."""
        return key in self._s.rows

    # ---- persistence ------------------------------------------------------------------------
    def state_bytes(self) -> bytes:
        """The partial bundle as bytes (msgpack)."""
        return msgspec.msgpack.encode(self._s)

    @classmethod
    def restore(cls, data: bytes) -> BundleBuilder:
        """A builder continuing from :meth:`state_bytes`."""
        try:
            state = msgspec.msgpack.decode(data, type=_State)
        except msgspec.DecodeError as exc:
            raise ValidationError(f"not a bundle builder state: {exc}") from None
        b = cls.__new__(cls)
        b._s = state
        return b

    # ---- output -----------------------------------------------------------------------------
    def table(self) -> KernelTable:
        """The kernels as they would be written (timeline rows joined with features by kernel_id)."""
        feats = [self._s.rows[k] for k in self._s.rows]
        feats.sort(key=lambda r: (r.get("kernel_id", -1), r.get("name", "")))
        if not self._s.timeline:
            return KernelTable.from_rows(feats)
        tl = [dict(r) for r in self._s.timeline]
        by_id = {r.get("kernel_id"): r for r in feats if r.get("kernel_id", -1) >= 0}
        for r in tl:
            f = by_id.get(r.get("kernel_id"))
            if f is not None:
                for k, v in f.items():
                    if k not in r or _unknown(r[k]):
                        r[k] = v
        return KernelTable.from_rows(tl)

    def finalize(self) -> tuple[str, bytes, bytes]:
        """``(bundle hash, manifest.json bytes, kernels.npz bytes)``; deterministic."""
        table = self.table()
        npz = table_to_npz(table)
        part_hashes = sorted(self._s.hashes.values())
        part_hashes += sorted(_row_hash(r) for r in self._s.timeline)
        kh = hashlib.sha256("\n".join(part_hashes).encode()).hexdigest()
        manifest = BundleManifest(
            trace_id=self._s.trace_id, source_gpu=self._s.source_gpu, workload=self._s.workload,
            kind=self._s.kind, kernel_count=len(table), baseline=baseline_timings(table),
            kernel_hashes_sha256=kh,
            files={KERNELS_NAME: hashlib.sha256(npz).hexdigest()},
            warnings=[w for k in sorted(self._s.warnings) for w in self._s.warnings[k]],
        )
        return bundle_hash(manifest), msgspec.json.encode(manifest), npz


def _unknown(v: Any) -> bool:
    return v is None or v == "" or v == -1 or (isinstance(v, float) and math.isnan(v))


def bundle_hash(manifest: BundleManifest) -> str:
    """Content address: sha256 over the part hashes and the identifying manifest fields."""
    ident = msgspec.json.encode({
        "format_version": manifest.format_version, "trace_id": manifest.trace_id,
        "source_gpu": manifest.source_gpu, "workload": manifest.workload, "kind": manifest.kind,
        "kernel_count": manifest.kernel_count, "kernels": manifest.kernel_hashes_sha256,
    })
    return hashlib.sha256(ident).hexdigest()


def baseline_timings(table: KernelTable) -> dict[str, float]:
    """Measured source-GPU timings present in a table (empty if it has no durations)."""
    if not table.has("duration_ns"):
        return {}
    dur = table["duration_ns"]
    out = {"kernel_time_ns": float(np.nansum(dur))}
    if table.has("start_ns"):
        start = table["start_ns"]
        out["span_ns"] = float(np.nanmax(start + dur) - np.nanmin(start))
        if table.has("step"):
            steps = table["step"]
            kinds = table["step_kind"]
            per_kind: dict[str, list[float]] = {}
            for s in np.unique(steps[steps >= 0]):
                sel = steps == s
                span = float(np.nanmax(start[sel] + dur[sel]) - np.nanmin(start[sel]))
                per_kind.setdefault(str(kinds[sel][0]) or "step", []).append(span)
            for kind, spans in per_kind.items():
                out[f"step_mean_ns:{kind}"] = float(np.mean(spans))
                out[f"steps:{kind}"] = float(len(spans))
    return out


def table_to_npz(table: KernelTable) -> bytes:
    """A KernelTable as deterministic ``.npz`` bytes (fixed zip timestamps, sorted names),
    deflated (level 1): a unicode column is as wide as its longest string, four bytes a
    character (the sample's kernel names: 25 MB stored, under 2 MB deflated; see
    :meth:`KernelTable.save_npz`)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name in sorted(table.columns):
            arr = table[name]
            if arr.dtype == object:
                arr = arr.astype(str)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            body = io.BytesIO()
            np.lib.format.write_array(body, np.ascontiguousarray(arr), allow_pickle=False)
            zf.writestr(info, body.getvalue(), compresslevel=1)
    return buf.getvalue()


def write_bundle(folder: str | Path, manifest_bytes: bytes, npz_bytes: bytes) -> Path:
    """Write a finalised bundle into ``folder`` (created); returns the folder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / KERNELS_NAME).write_bytes(npz_bytes)
    (folder / MANIFEST_NAME).write_bytes(manifest_bytes)
    return folder


def load_bundle(source: str | Path | Mapping[str, bytes] | tuple[bytes, bytes]) -> Bundle:
    """Load a bundle from a folder, ``{name: bytes}`` or ``(manifest_bytes, npz_bytes)``.

    The npz content hash is checked against the manifest.
    """
    if isinstance(source, tuple):
        manifest_bytes, npz = source
    elif isinstance(source, Mapping):
        manifest_bytes, npz = source[MANIFEST_NAME], source[KERNELS_NAME]
    else:
        folder = Path(source)
        manifest_bytes = (folder / MANIFEST_NAME).read_bytes()
        npz = (folder / KERNELS_NAME).read_bytes()
    try:
        manifest = msgspec.json.decode(manifest_bytes, type=BundleManifest)
    except msgspec.DecodeError as exc:
        raise ValidationError(f"invalid bundle manifest: {exc}", field=MANIFEST_NAME) from None
    if manifest.format_version > FORMAT_VERSION:
        raise ValidationError(
            f"bundle format {manifest.format_version} is newer than {FORMAT_VERSION}",
            field="format_version",
        )
    expected = manifest.files.get(KERNELS_NAME)
    if expected is not None and hashlib.sha256(npz).hexdigest() != expected:
        raise ValidationError("kernels.npz does not match the manifest's hash", field=KERNELS_NAME)
    table = KernelTable.load_npz(io.BytesIO(npz))
    if len(table) != manifest.kernel_count:
        raise ValidationError(
            f"kernels.npz has {len(table)} rows, manifest says {manifest.kernel_count}",
            field=KERNELS_NAME,
        )
    return Bundle(hash=bundle_hash(manifest), manifest=manifest, kernels=table)
