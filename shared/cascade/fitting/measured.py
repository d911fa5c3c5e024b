"""Measured cross-GPU data sets (Vidur operator profiles, NeuSight GEMM latencies) as
KernelTables keyed for pairing the same operator across GPUs.

Vidur: ``<model>__mlp__<gpu>.csv`` (or the Vidur repository's ``<gpu>/<org>/<model>/mlp.csv``)
with ``time_stats.<op>.mean`` (ms; ``.median`` where a file has no mean: :data:`VIDUR_STATS`) per
(num_tokens, num_tensor_parallel_workers) and the model shape columns; NeuSight: ``{linear,bmm}__<GPU>.csv`` (``Latency`` ms, ``B,M,N,K`` with
C[B,M,K] = A[B,M,N] @ W[B,N,K]) plus ``device__<GPU>.json``, or the NeuSight repository's CSVs
with ``OPName`` and ``Device`` columns (``collect/<op>/<torch>/<Device>.csv``, or several GPUs in
one ``test/<op>.csv``). Device names map to specs through the registry aliases.
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cascade.calibration import measurement_of
from cascade.errors import TraceFormatError, UnknownGPUError
from cascade.gpus.registry import GPURegistry
from cascade.gpus.spec import GPUSpec
from cascade.kerneltable import KernelTable

#: Which of a Vidur operator's ``time_stats.<op>.*`` columns is its time, first found wins. The
#: mean comes first: Vidur's timer resolves 1 us, so the median of a 2-5 us kernel's samples is a
#: whole or half microsecond (10-25% steps), while the mean of its ~20 samples resolves 0.05 us; a
#: step's or layer's time is a sum of kernels, whose expectation is the sum of their means. Over
#: every row the two differ by a median 0.0% (1st-99th percentile -4% to +5% on the A100, -5% to
#: +9% on the H100).
VIDUR_STATS: tuple[str, ...] = ("mean", "median")

#: Vidur MLP-profile operators and the report family each belongs to.
VIDUR_OPS: dict[str, str] = {
    "emb": "embedding", "input_layernorm": "norm", "attn_pre_proj": "linear",
    "attn_rope": "elementwise", "attn_post_proj": "linear", "post_attention_layernorm": "norm",
    "mlp_up_proj": "linear", "mlp_act": "elementwise", "mlp_down_proj": "linear", "add": "elementwise",
}

#: Vidur operators run as one thread block per token: vLLM's ``rms_norm`` launches
#: ``grid(num_tokens), block(min(hidden_size, 1024))`` (``csrc/layernorm_kernels.cu``). Their
#: rows carry that launch shape, so the model sees their waves (the measured times step at
#: every 2 x SMs tokens on the A100 and the H100: 216 and 264, two 1024-thread blocks per SM).
VIDUR_ROW_NORMS: tuple[str, ...] = ("input_layernorm", "post_attention_layernorm")


@dataclass(frozen=True, slots=True)
class MeasuredSet:
    """One file's measurements on one GPU."""

    kind: str
    """``vidur`` or ``neusight`` (also the scaled model's measurement kind)."""
    dataset: str
    """Group whose GPUs are compared: the Vidur model name or the NeuSight op."""
    gpu_label: str
    """Device name as the file names it."""
    spec: GPUSpec
    table: KernelTable
    keys: np.ndarray
    """Per-row pairing key (same operator and shape on another GPU has the same key)."""
    groups: np.ndarray
    """Per-row report family (linear, bmm, norm, elementwise, embedding)."""
    path: Path

    @property
    def measurement(self) -> str:
        """Measurement kind for :class:`cascade.engine.models.ScaledConfig`: ``kernel`` for
        Vidur's per-op CUDA-event times, ``neusight-<op>`` for NeuSight's harness (whose fixed
        per-call time differs between ``linear`` and ``bmm``; calibration falls back from
        ``neusight-<op>`` to ``neusight``)."""
        return measurement_of(self.kind, self.dataset)


def _lookup(reg: GPURegistry, label: str, path: Path) -> GPUSpec:
    for candidate in (label, label.replace("_", " "), label.replace("_", "-")):
        spec = reg.resolve(candidate)
        if spec is not None:
            return spec
    raise UnknownGPUError(f"{label} (from {path.name})", reg.ids())


def _f(row: dict[str, str], col: str, path: Path, line: int) -> float:
    raw = row.get(col)
    if raw is None or raw == "":
        return float("nan")
    try:
        return float(raw)
    except ValueError:
        raise TraceFormatError(str(path), line, f"a number in column {col!r}", raw) from None


def _vidur_time(row: dict[str, str], op: str, path: Path, line: int) -> float:
    """An operator's time (ms) in a Vidur row: the first of :data:`VIDUR_STATS` present."""
    for stat in VIDUR_STATS:
        t = _f(row, f"time_stats.{op}.{stat}", path, line)
        if np.isfinite(t):
            return t
    return float("nan")


def vidur_tp_degree(keys: np.ndarray) -> np.ndarray:
    """Tensor-parallel degree of each Vidur row key (``H,KV,E,F,gated,T,tp,op``, see
    :func:`load_vidur`)."""
    return np.fromiter((int(str(k).split(",")[6]) for k in keys), dtype=np.int64, count=len(keys))


def _vidur_names(path: Path, reg: GPURegistry) -> tuple[str, str] | None:
    """(model, gpu label) of a Vidur MLP profile: from ``<model>__mlp__<gpu>.csv``, or from
    the repository's layout ``.../<gpu>/<org>/<model>/mlp.csv`` (the nearest folder above the
    model's that names a known GPU)."""
    m = re.match(r"^(?P<model>.+)__mlp__(?P<gpu>.+)\.csv$", path.name)
    if m:
        return m.group("model"), m.group("gpu")
    if path.name != "mlp.csv":
        return None
    for folder in list(path.parents)[1:]:
        if folder.name and reg.resolve(folder.name) is not None:
            return path.parent.name, folder.name
    return None


def load_vidur(path: Path, reg: GPURegistry) -> MeasuredSet:
    """Load a Vidur MLP profile (FP16 operators): ``<model>__mlp__<gpu>.csv`` or, as the Vidur
    repository lays them out, ``<gpu>/<org>/<model>/mlp.csv``."""
    names = _vidur_names(path, reg)
    if names is None:
        raise TraceFormatError(str(path), None, "a file named <model>__mlp__<gpu>.csv or <gpu>/<org>/<model>/mlp.csv")
    model, gpu = names
    spec = _lookup(reg, gpu, path)
    rows: list[dict[str, object]] = []
    keys: list[str] = []
    groups: list[str] = []
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        need = {"n_head", "n_embd", "num_tokens", "num_tensor_parallel_workers"}
        missing = need - set(reader.fieldnames or [])
        if missing:
            raise TraceFormatError(str(path), 1, f"columns {', '.join(sorted(need))}",
                                   ",".join(reader.fieldnames or []))
        for line, r in enumerate(reader, start=2):
            T = int(_f(r, "num_tokens", path, line))
            tp = int(_f(r, "num_tensor_parallel_workers", path, line))
            E = int(_f(r, "n_embd", path, line))
            H = int(_f(r, "n_head", path, line))
            kv = _f(r, "n_kv_head", path, line)
            KV = H if np.isnan(kv) else int(kv)
            ff = _f(r, "n_expanded_embd", path, line)
            F = 4 * E if np.isnan(ff) else int(ff)
            gated = str(r.get("use_gated_mlp", "True")).strip().lower() in ("true", "1")
            hd = E // H
            for op, fam in VIDUR_OPS.items():
                t = _vidur_time(r, op, path, line)
                if not np.isfinite(t) or t <= 0:
                    continue
                gemm: tuple[int, int, int] | None = None
                nbytes = 0.0
                if op == "attn_pre_proj":
                    gemm = (T, (H + 2 * KV) * hd // tp, E)
                elif op == "attn_post_proj":
                    gemm = (T, E, H * hd // tp)
                elif op == "mlp_up_proj":
                    gemm = (T, (2 if gated else 1) * F // tp, E)
                elif op == "mlp_down_proj":
                    gemm = (T, E, F // tp)
                elif op == "emb":
                    nbytes = 2.0 * 2 * T * E
                elif op in ("input_layernorm", "post_attention_layernorm"):
                    nbytes = 2.0 * (2 * T * E + E)
                elif op == "attn_rope":
                    nbytes = 2.0 * 2 * T * (H + KV) * hd / tp
                elif op == "mlp_act":
                    nbytes = 2.0 * (3 if gated else 2) * T * F / tp
                elif op == "add":
                    nbytes = 2.0 * 3 * T * E
                row: dict[str, object] = {"name": op, "op": op, "dtype": "fp16", "duration_ns": t * 1e6}
                if gemm:
                    mm, nn, kk = gemm
                    row.update(m=mm, n=nn, k=kk, batch=1, flops=2.0 * mm * nn * kk,
                               bytes=2.0 * (mm * kk + kk * nn + mm * nn))
                else:
                    row.update(bytes=nbytes, flops=0.0)
                if op in VIDUR_ROW_NORMS:  # vLLM's rms_norm: grid(num_tokens), block(min(hidden, 1024))
                    row.update(grid_x=T, block_x=min(E, 1024))
                rows.append(row)
                keys.append(f"{H},{KV},{E},{F},{int(gated)},{T},{tp},{op}")
                groups.append(fam)
    return MeasuredSet("vidur", model, gpu, spec, KernelTable.from_rows(rows),
                       np.asarray(keys, dtype=object), np.asarray(groups, dtype=object), path)


def _neusight_row(r: dict[str, str], op: str, path: Path, line: int) -> tuple[dict[str, object], str] | None:
    """One NeuSight CSV row as a kernel-table row and its pairing key (None: no latency)."""
    lat = _f(r, "Latency", path, line)
    B, M, N, K = (int(_f(r, c, path, line)) for c in ("B", "M", "N", "K"))
    if not np.isfinite(lat) or lat <= 0:
        return None
    name = (r.get("Kernel Name") or "").strip() or f"{op}_sgemm"
    grid = [int(_f(r, c, path, line)) if r.get(c) else -1 for c in ("Grid x", "Grid y", "Grid z")]
    block = [int(_f(r, c, path, line)) if r.get(c) else -1 for c in ("Block x", "Block y", "Block z")]
    if op == "linear":
        mm, batch = B * M, 1
    else:
        mm, batch = M, B
    row: dict[str, object] = {
        "name": name, "op": op, "dtype": "fp32", "duration_ns": lat * 1e6,
        "batch": batch, "m": mm, "n": K, "k": N, "flops": 2.0 * B * M * N * K,
        "bytes": 4.0 * batch * (mm * N + N * K + mm * K),
        "grid_x": grid[0], "grid_y": grid[1], "grid_z": grid[2],
        "block_x": block[0], "block_y": block[1], "block_z": block[2],
    }
    return row, f"{B},{M},{N},{K}"


_NEUSIGHT_COLUMNS = {"Latency", "B", "M", "N", "K"}


def _neusight_reader(fh: io.TextIOBase, path: Path) -> csv.DictReader[str]:
    reader = csv.DictReader(fh)
    if _NEUSIGHT_COLUMNS - set(reader.fieldnames or []):
        raise TraceFormatError(str(path), 1, f"columns {', '.join(sorted(_NEUSIGHT_COLUMNS))}",
                               ",".join(reader.fieldnames or []))
    return reader


def _neusight_set(op: str, label: str, spec: GPUSpec, rows: list[dict[str, object]], keys: list[str],
                  path: Path) -> MeasuredSet:
    return MeasuredSet("neusight", op, label, spec, KernelTable.from_rows(rows),
                       np.asarray(keys, dtype=object), np.full(len(rows), op, dtype=object), path)


def load_neusight(path: Path, reg: GPURegistry) -> MeasuredSet:
    """Load a NeuSight ``{linear,bmm}__<GPU>.csv`` (FP32 cuBLAS GEMMs)."""
    m = re.match(r"^(?P<op>linear|bmm)__(?P<gpu>.+)\.csv$", path.name)
    if not m:
        raise TraceFormatError(str(path), None, "a file named linear__<GPU>.csv or bmm__<GPU>.csv")
    op = m.group("op")
    label = m.group("gpu")
    device_json = path.with_name(f"device__{label}.json")
    device_name = label
    if device_json.is_file():
        try:
            device_name = str(json.loads(device_json.read_text()).get("Device", label))
        except json.JSONDecodeError as exc:
            raise TraceFormatError(str(device_json), exc.lineno, "a JSON object with 'Device'") from None
    try:
        spec = _lookup(reg, device_name, path)
    except UnknownGPUError:
        spec = _lookup(reg, label, path)
    rows: list[dict[str, object]] = []
    keys: list[str] = []
    with path.open(newline="") as fh:
        for line, r in enumerate(_neusight_reader(fh, path), start=2):
            got = _neusight_row(r, op, path, line)
            if got is not None:
                rows.append(got[0])
                keys.append(got[1])
    return _neusight_set(op, label, spec, rows, keys, path)


def load_neusight_native(path: Path, reg: GPURegistry, skipped: list[str] | None = None) -> list[MeasuredSet]:
    """Load a NeuSight CSV as its repository lays them out: ``collect/<op>/<torch>/<Device>.csv``
    (one GPU) or ``test/<op>.csv`` (several GPUs). The op comes from each row's ``OPName``
    (else the file or folder name), the GPU from its ``Device`` column (else the file name);
    rows of ops other than ``linear`` / ``bmm`` and of GPUs no spec describes are left out
    (named in ``skipped``)."""
    groups: dict[tuple[str, str], tuple[list[dict[str, object]], list[str]]] = {}
    other_ops: set[str] = set()
    fallback_op = next((part for part in (path.stem, *(p.name for p in path.parents)) if part in ("linear", "bmm")), "")
    with path.open(newline="") as fh:
        for line, r in enumerate(_neusight_reader(fh, path), start=2):
            op = (r.get("OPName") or fallback_op).strip().lower()
            if op not in ("linear", "bmm"):
                other_ops.add(op or "?")
                continue
            got = _neusight_row(r, op, path, line)
            if got is None:
                continue
            rows, keys = groups.setdefault((op, (r.get("Device") or path.stem).strip()), ([], []))
            rows.append(got[0])
            keys.append(got[1])
    if other_ops and skipped is not None:
        skipped.append(f"{path.name}: rows of {', '.join(sorted(other_ops))} left out (Cascade compares linear and bmm)")
    out: list[MeasuredSet] = []
    for (op, device), (rows, keys) in sorted(groups.items()):
        try:
            spec = _lookup(reg, device, path)
        except UnknownGPUError as exc:
            if skipped is None:
                raise
            skipped.append(f"{path.name} ({device}): {exc} (add a spec with --specs DIR)")
            continue
        out.append(_neusight_set(op, device.replace(" ", "_"), spec, rows, keys, path))
    return out


def discover(
    directory: str | Path, reg: GPURegistry, *, skipped: list[str] | None = None
) -> list[MeasuredSet]:
    """Every Vidur / NeuSight file under a directory (recursively), loaded.

    A file for a GPU no spec describes is skipped, not fatal: its message (naming the file
    and listing the known GPUs) is appended to ``skipped`` so callers can report it.
    """
    root = Path(directory)
    if not root.is_dir():
        raise TraceFormatError(str(root), None, "a directory of measured data")
    from cascade.fitting.e2e import KERNELBENCH_FILE, WHOLE_DIR

    out: list[MeasuredSet] = []
    seen: dict[tuple[str, str, str], Path] = {}
    end_to_end: list[Path] = []
    for path in sorted(root.rglob("*.csv")):
        rel = path.relative_to(root)
        if rel == KERNELBENCH_FILE or WHOLE_DIR in rel.parts[:-1]:
            end_to_end.append(rel)  # whole models and single operators: the --e2e protocol's
            continue
        try:
            if "__mlp__" in path.name or (path.name == "mlp.csv" and _vidur_names(path, reg)):
                found = [load_vidur(path, reg)]
            elif re.match(r"^(linear|bmm)__.+\.csv$", path.name):
                found = [load_neusight(path, reg)]
            elif _NEUSIGHT_COLUMNS | {"OPName"} <= _header(path):
                found = load_neusight_native(path, reg, skipped)
            else:
                found = []
                if skipped is not None:
                    skipped.append(f"{path.name}: not a kind Cascade compares (a Vidur "
                                   "<model>__mlp__<gpu>.csv or <gpu>/<org>/<model>/mlp.csv, a NeuSight "
                                   "{linear,bmm}__<GPU>.csv or a NeuSight CSV with OPName/Device columns)")
        except UnknownGPUError as exc:
            if skipped is None:
                raise
            skipped.append(f"{path.name}: {exc} (add a spec with --specs DIR)")
            continue
        for ms in found:  # the same GPU's data twice (two layouts of one data set): first one counts
            key = (ms.kind, ms.dataset, ms.spec.id)
            if key in seen:
                if skipped is not None:
                    skipped.append(f"{path.name}: {ms.kind} {ms.dataset} on {ms.spec.id} already read from "
                                   f"{seen[key].name}")
                continue
            seen[key] = path
            out.append(ms)
    if end_to_end and skipped is not None:
        folders = sorted({str(p.parent) if WHOLE_DIR not in p.parts else WHOLE_DIR + "/" for p in end_to_end})
        skipped.append(f"{len(end_to_end)} file(s) under {', '.join(folders)}: whole models and single "
                       "operators with measured totals, scored by the end-to-end protocol "
                       "(cascade validate --e2e), not per operator")
    return out


def _header(path: Path) -> set[str]:
    """Column names of a CSV file's first line."""
    with path.open(newline="") as fh:
        return {c.strip() for c in next(csv.reader(fh), [])}


@dataclass(frozen=True, slots=True)
class Pair:
    """The same operators measured on a source and a target GPU."""

    source: MeasuredSet
    target: MeasuredSet
    source_table: KernelTable
    """Source rows in common, in pairing order."""
    target_ns: np.ndarray
    """Measured target durations for those rows."""
    groups: np.ndarray
    keys: np.ndarray


def pairs(sets: list[MeasuredSet]) -> list[Pair]:
    """Every ordered (source, target) pair of different GPUs within a (kind, dataset) group."""
    out: list[Pair] = []
    by_group: dict[tuple[str, str], list[MeasuredSet]] = {}
    for s in sets:
        by_group.setdefault((s.kind, s.dataset), []).append(s)
    for members in by_group.values():
        for src in members:
            for tgt in members:
                if src is tgt or src.spec.id == tgt.spec.id:
                    continue
                common, si, ti = np.intersect1d(src.keys.astype(str), tgt.keys.astype(str),
                                                return_indices=True)
                if len(common) == 0:
                    continue
                out.append(Pair(src, tgt, src.table.take(si), tgt.table["duration_ns"][ti],
                                src.groups[si], common.astype(object)))
    return out
