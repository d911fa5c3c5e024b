"""The LLM kernel model: physics of :mod:`cascade.llm.work` times a measured efficiency
surface per (GPU, operator key), carried to GPUs without one from their closest calibrated
relative.

On one GPU a row's model time is ``(fixed + roofline) * exp(residual(shape))``: ``fixed`` the
surface's smallest-kernel floor, ``roofline`` the work at the GPU's peaks (its own dtype's
tensor rate, its bandwidth, its links), ``residual`` the measured log ratio interpolated at the
shape (:mod:`cascade.llm.surface`). A GPU without its own surface for a key runs the physics of
its own spec with the residual of the nearest calibrated GPU of its software family (the same
kernels: B300 / GB200 <- B200, H200 <- H100; :func:`software_family`), and says so.

From a measured source time, the target time is ``t_src * model(target) / model(source)``.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import zipfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from cascade.errors import ValidationError
from cascade.gpus.spec import GPUSpec
from cascade.kerneltable import KernelTable
from cascade.llm import surface, work

#: The measurement the surfaces are fitted on (a harness's CUDA-graph time per call).
COLLECTOR_DEFAULT = "vllm-0.24"


class SurfaceInfo(msgspec.Struct, frozen=True, kw_only=True):
    """One fitted surface: which GPU, collector and operator key, and its fixed floor."""

    gpu: str
    """Spec id of the GPU it was measured on."""
    arch: str
    sm_version: int
    collector: str
    """Which harness and software version measured it (``vllm-0.24``, ``vllm-0.14``, ``nccl``)."""
    key: str
    """Operator key (:func:`cascade.llm.work.keys`)."""
    dims: int
    fixed_ns: float
    """The floor under the roofline: a fraction of the smallest measured time."""
    count: int
    """Measured shapes behind it."""


class LlmCalibration(msgspec.Struct, frozen=True, kw_only=True):
    """Fitted surfaces (their points live in :attr:`arrays`) and the accuracy measured for them."""

    id: str = "llm-kernels"
    version: str = ""
    source: str = ""
    """The data set it was fitted on."""
    heldout: float = 0.0
    """Fraction of shapes (hash split) kept out of the fit, scored by ``--heldout``."""
    surfaces: list[SurfaceInfo] = []
    metrics: list[dict[str, Any]] = []
    """Rows of ``cascade validate --llm`` measured when it was fitted (what predictions quote)."""
    arrays: dict[str, Any] = {}
    """``x{i}`` [N, dims] log2 shapes and ``r{i}`` [N] residuals of surface i (not serialised
    as JSON)."""

    def digest(self) -> str:
        h = hashlib.sha256(msgspec.json.encode(self.surfaces))
        for name in sorted(self.arrays):
            h.update(np.ascontiguousarray(self.arrays[name]).tobytes())
        return h.hexdigest()[:16]

    def points(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        return self.arrays[f"x{i}"], self.arrays[f"r{i}"]


def without_gpus(cal: LlmCalibration, gpus: frozenset[str]) -> LlmCalibration:
    """The calibration with every surface measured on ``gpus`` removed (a GPU never measured: what
    the left-out protocols score)."""
    keep = [i for i, s in enumerate(cal.surfaces) if s.gpu not in gpus]
    arrays = {}
    for j, i in enumerate(keep):
        arrays[f"x{j}"], arrays[f"r{j}"] = cal.points(i)
    return msgspec.structs.replace(cal, surfaces=[cal.surfaces[i] for i in keep], arrays=arrays)


def save_llm_calibration(cal: LlmCalibration, path: str | Path) -> None:
    """Write as one .npz, LZMA-compressed (1.4 MB for llm-kernels' 251 surfaces, 2.1 deflated; any
    ``np.load`` reads it): ``meta`` (JSON) beside the arrays."""
    meta = msgspec.json.encode(msgspec.structs.replace(cal, arrays={}))
    buf = {"meta": np.frombuffer(meta, dtype=np.uint8)}
    buf.update({k: np.asarray(v) for k, v in cal.arrays.items()})
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_LZMA) as zf:
        for name, arr in buf.items():
            with zf.open(f"{name}.npy", "w") as fh:
                np.lib.format.write_array(fh, arr, allow_pickle=False)


def read_llm_calibration(data: bytes | str | Path) -> LlmCalibration:
    """Read what :func:`save_llm_calibration` wrote."""
    src: Any = io.BytesIO(data) if isinstance(data, bytes) else data
    with np.load(src, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files if k != "meta"}
        meta = z["meta"].tobytes()
    cal = msgspec.json.decode(meta, type=LlmCalibration)
    return msgspec.structs.replace(cal, arrays=arrays)


@functools.lru_cache(maxsize=4)
def load_llm_calibration(path: str | None = None) -> LlmCalibration:
    """The packaged LLM calibration (``cascade/calibration/llm.npz``) or one from ``path``."""
    if path:
        return read_llm_calibration(Path(path))
    data = resources.files("cascade.calibration").joinpath("llm.npz").read_bytes()
    return read_llm_calibration(data)


def software_family(spec: GPUSpec | SurfaceInfo) -> str:
    """Which kernels a GPU runs (the libraries build per SM family): sm80 (A100, A10, A40...),
    sm89 (Ada), sm90 (Hopper), sm100 (B200 / B300 / GB200 / GB300: tcgen05 kernels), sm120
    (RTX PRO Blackwell: no tcgen05, mma.sync kernels like Ada's), older below sm80."""
    v = spec.sm_version
    if v >= 120:
        return "sm120"
    if v >= 100:
        return "sm100"
    if v >= 90:
        return "sm90"
    if v >= 89:
        return "sm89"
    if v >= 80:
        return "sm80"
    return "sm70"


#: Per software family, the families whose measured efficiency it borrows, nearest first.
FAMILY_ORDER: dict[str, tuple[str, ...]] = {
    "sm100": ("sm100", "sm90", "sm89", "sm80"),
    "sm90": ("sm90", "sm100", "sm80", "sm89"),
    "sm89": ("sm89", "sm80", "sm90", "sm100"),
    "sm80": ("sm80", "sm89", "sm90", "sm100"),
    "sm120": ("sm120", "sm89", "sm80", "sm100", "sm90"),
    "sm70": ("sm80", "sm89", "sm90", "sm100"),
}


def key_fallbacks(key: str) -> list[str]:
    """Keys whose surface stands in for ``key`` where no GPU measured it, nearest first."""
    parts = key.split("|")
    out = [key]
    if parts[0] == "gemm":
        d = parts[1]
        chain = {"w4_marlin": ["bf16"], "w8_marlin": ["bf16"], "fp8_block": ["fp8", "bf16"], "fp4": ["fp8", "bf16"],
                 "int4": ["bf16"], "mxfp4": ["bf16"], "fp16": ["bf16"], "fp8": ["bf16"]}.get(d, ["bf16"])
        out += [f"gemm|{c}" for c in chain]
    elif parts[0] == "attention":
        _, phase, kv, w = parts
        out += [f"attention|{phase}|bf16|{w}", f"attention|{phase}|{kv}|w0", f"attention|{phase}|bf16|w0"]
    elif parts[0] == "moe":
        _, d, dist = parts
        chain = {"w4_marlin": ["int4", "bf16"], "w8_marlin": ["bf16"], "fp8_block": ["fp8", "bf16"],
                 "fp4": ["mxfp4", "fp8", "bf16"], "mxfp4": ["int4", "bf16"], "int4": ["bf16"]}.get(d, ["bf16"])
        out += [f"moe|{d}|balanced"] + [f"moe|{c}|{dist}" for c in chain] + [f"moe|{c}|balanced" for c in chain]
    elif parts[0] == "collective":
        _, coll, impl, ranks = parts
        out += [f"collective|{coll}|nccl|{ranks}"]
    seen: list[str] = []
    for k in out:
        if k not in seen:
            seen.append(k)
    return seen


def _near_variant(cal: LlmCalibration, key: str, candidates: list[int]) -> list[int]:
    """Surfaces of ``candidates`` for the key, or for the nearest numeric variant of its last
    part (a sliding window of 4096 -> the 8192 surface; 16 ranks -> 8)."""
    exact = [i for i in candidates if cal.surfaces[i].key == key]
    if exact:
        return exact
    head, _, tail = key.rpartition("|")
    num = tail.lstrip("w")
    if not num.isdigit():
        return []
    best: list[int] = []
    gap = np.inf
    for i in candidates:
        h2, _, t2 = cal.surfaces[i].key.rpartition("|")
        n2 = t2.lstrip("w")
        if h2 != head or not n2.isdigit() or (int(n2) == 0) != (int(num) == 0):
            continue
        d = abs(np.log2(max(int(n2), 1)) - np.log2(max(int(num), 1)))
        if d < gap:
            gap, best = d, [i]
        elif d == gap:
            best.append(i)
    return best


@dataclass(frozen=True, slots=True)
class Choice:
    """The surface a (GPU, key) uses and why."""

    index: int
    basis: str
    own: bool
    """True when the surface was measured on this very GPU (and key)."""


def choose_surface(cal: LlmCalibration, spec: GPUSpec, key: str, *, collector: str = COLLECTOR_DEFAULT,
                   exclude: frozenset[str] = frozenset()) -> Choice | None:
    """The surface for ``key`` on ``spec``: its own (this collector first), else the nearest
    calibrated GPU of its software family (the same bandwidth class first), else a stand-in key."""
    fam = software_family(spec)
    order = FAMILY_ORDER.get(fam, (fam,))
    allowed = [i for i, s in enumerate(cal.surfaces) if s.gpu not in exclude]
    for k in key_fallbacks(key):
        # the GPU's own surface, this collector first
        own = [i for i in _near_variant(cal, k, [i for i in allowed if cal.surfaces[i].gpu == spec.id])]
        if own:
            pick = sorted(own, key=lambda i: cal.surfaces[i].collector != collector)[0]
            s = cal.surfaces[pick]
            return Choice(pick, f"{s.gpu} measured ({s.collector}, {s.key})", own=k == key and s.key == key)
        groups = _link_groups(cal, spec, allowed) if k.startswith("collective|") else [
            [i for i in allowed if software_family(cal.surfaces[i]) == f] for f in order]
        for group in groups:
            peers = [i for i in group if cal.surfaces[i].gpu != spec.id]
            hits = _near_variant(cal, k, peers)
            if not hits:
                continue
            pick = sorted(hits, key=lambda i: (cal.surfaces[i].collector != collector,
                                               cal.surfaces[i].arch != spec.arch, cal.surfaces[i].gpu))[0]
            s = cal.surfaces[pick]
            return Choice(pick, f"{s.gpu}'s measured efficiency ({s.collector}, {s.key}) on {spec.id}'s peaks",
                          own=False)
    return None


def _link_groups(cal: LlmCalibration, spec: GPUSpec, allowed: list[int]) -> list[list[int]]:
    """Collectives borrow from GPUs joined the same way (NVLink with or without in-switch
    reductions, or PCIe), the nearest link bandwidth first: the link decides, not the SMs."""
    from cascade.gpus.registry import default_registry

    reg = default_registry()

    def link(gpu: str) -> tuple[bool, bool, float]:
        s = reg.resolve(gpu)
        if s is None:
            return (False, False, 0.0)
        return (s.nvlink_gbps > 0, s.nvls, work.link_bandwidth_bps(s))

    mine = (spec.nvlink_gbps > 0, spec.nvls, work.link_bandwidth_bps(spec))
    gpus = sorted({cal.surfaces[i].gpu for i in allowed},
                  key=lambda g: (link(g)[0] != mine[0], link(g)[1] != mine[1],
                                 abs(np.log(max(link(g)[2], 1.0) / mine[2])), g))
    return [[i for i in allowed if cal.surfaces[i].gpu == g] for g in gpus]


@dataclass(frozen=True, slots=True)
class LlmTimes:
    """Per row: model time on one GPU, the surface each used, what the software substituted."""

    model_ns: np.ndarray
    roofline_ns: np.ndarray
    basis: np.ndarray
    own: np.ndarray
    note: np.ndarray
    distance: np.ndarray
    """log2 distance from the row's shape to the nearest measured one (inf: no surface)."""


#: Block-scaled FP8 GEMM time over per-tensor FP8 GEMM time of the same shape where the GPU's work
#: dominates (llm-kernels gemm.parquet at vLLM 0.24, m >= 4096: medians H100 0.99, H200 1.06, B200
#: 1.20, L40S 1.36), per software family (:func:`software_family`); others take the largest.
FP8_BLOCK_OVER_PER_TENSOR = {"sm90": 1.06, "sm100": 1.20, "sm89": 1.36}


def model_times(table: KernelTable, spec: GPUSpec, cal: LlmCalibration, *, collector: str = COLLECTOR_DEFAULT,
                exclude: frozenset[str] = frozenset(), graphed: bool = False) -> LlmTimes:
    """Model time of every LLM row of ``table`` on ``spec`` (rows of other ops: NaN).

    ``graphed``: the rows run inside CUDA graphs, as a vLLM engine step runs its layers. The
    collector timed block-scaled FP8 GEMMs eagerly (its README: launch overhead shows at small
    sizes; 5-20x the per-tensor FP8 kernel of the same shape below 256 tokens, ~1x at 4k and
    more): a graphed one costs at most the per-tensor FP8 GEMM of its shape times
    :data:`FP8_BLOCK_OVER_PER_TENSOR`, the GPU-bound ratio of the two, and never more than the
    BF16 GEMM of its shape (half its weight bytes, the same math at half the rate) times that ratio:
    vLLM 0.24's per-tensor FP8 kernel at one token reads 2x the H200's time on the B200 where its
    BF16 one is faster, a kernel choice, not the block-scaled path's."""
    out = _model_times(table, spec, cal, collector=collector, exclude=exclude)
    if not graphed or not len(table):
        return out
    sub = work.substitute(canonical_ops(table), spec)
    block = (np.asarray(table["op"]) == work.GEMM) & (np.asarray(sub.dtype) == "fp8_block")
    if not block.any():
        return out
    rows = np.flatnonzero(block)
    # the graphed GEMM of the same shape in per-tensor FP8 or in BF16, whichever is faster (the
    # same math as the first; the second's weights twice the bytes: no upper bound is lower)
    other = table.take(rows)
    alt = np.full(len(rows), np.inf)
    for dtype in ("fp8", "bf16"):
        other["dtype"] = np.full(len(rows), dtype, dtype=object)
        t = _model_times(other, spec, cal, collector=collector, exclude=exclude).model_ns
        alt = np.fmin(alt, np.where(np.isfinite(t), t, np.inf))
    ratio = FP8_BLOCK_OVER_PER_TENSOR.get(software_family(spec), max(FP8_BLOCK_OVER_PER_TENSOR.values()))
    capped = np.where(np.isfinite(alt), np.minimum(out.model_ns[rows], alt * ratio), out.model_ns[rows])
    model_ns = out.model_ns.copy()
    model_ns[rows] = capped
    basis = out.basis.copy()
    lower = rows[capped < out.model_ns[rows]]
    basis[lower] = [f"{b}; in a CUDA graph at most the per-tensor FP8 / BF16 GEMM of its shape x {ratio:g} "
                    "(the measured block-FP8 call was eager)" for b in out.basis[lower]]
    return LlmTimes(model_ns, out.roofline_ns, basis, out.own, out.note, out.distance)


def _model_times(table: KernelTable, spec: GPUSpec, cal: LlmCalibration, *, collector: str = COLLECTOR_DEFAULT,
                 exclude: frozenset[str] = frozenset()) -> LlmTimes:
    n = len(table)
    table = canonical_ops(table)
    sub = work.substitute(table, spec)
    roof = work.roofline_ns(table, spec, sub)
    keys = work.keys(table, sub)
    feats = work.features(table)
    out = np.full(n, np.nan)
    basis = np.full(n, "", dtype=object)
    own = np.zeros(n, dtype=bool)
    dist = np.full(n, np.inf)
    uniq, codes = work.factorize(keys)
    for u, key in enumerate(uniq):
        if not key:
            continue
        rows = np.flatnonzero(codes == u)
        choice = choose_surface(cal, spec, str(key), collector=collector, exclude=exclude)
        if choice is None:  # physics alone
            out[rows] = roof[rows] + spec.launch_overhead_ns
            basis[rows] = f"roofline of {spec.id} (no measured surface for {key})"
            continue
        info = cal.surfaces[choice.index]
        x, r = cal.points(choice.index)
        # a trace repeats its shapes (layers, steps): each distinct one is interpolated once
        view = np.ascontiguousarray(feats[rows, :info.dims]).view(np.dtype((np.void, 8 * info.dims))).ravel()
        _, first, back = np.unique(view, return_index=True, return_inverse=True)
        shapes, back = feats[rows[first], :info.dims], back.reshape(-1)
        res, near = surface.interpolate(x, r, shapes)
        res, near = res[back], near[back]
        fixed = info.fixed_ns
        why = choice.basis
        if not choice.own and software_family(info) != software_family(spec) \
                and not info.key.startswith("collective|"):  # (collectives borrow by link: _link_groups)
            # no GPU of its own software family measured this: the median efficiency of every GPU
            # that did (one other family's kernel choices are no better a guess than the rest's;
            # target left out, from the H100: A100 GEMMs 37.9 -> 19.0%, L40S 62.9 -> 49.9%)
            peers = [i for i, s in enumerate(cal.surfaces) if s.key == info.key and s.gpu not in exclude
                     and s.gpu != spec.id and s.collector == info.collector]
            if len(peers) > 1:
                stack = [surface.interpolate(*cal.points(i), shapes)[0][back] for i in peers]
                res = np.median(np.asarray(stack), axis=0)
                fixed = float(np.median([cal.surfaces[i].fixed_ns for i in peers]))
                why = (f"median measured efficiency of {', '.join(sorted(cal.surfaces[i].gpu for i in peers))} "
                       f"({info.collector}, {info.key}) on {spec.id}'s peaks")
        out[rows] = (fixed + roof[rows]) * np.exp(res)
        basis[rows] = why
        own[rows] = choice.own
        dist[rows] = near
    return LlmTimes(out, roof, basis, own, sub.note, dist)


#: Operator names of traced GEMMs (PyTorch's, vLLM's custom ops) that are LLM GEMM rows when their
#: dtype is a low-precision one (FP8, FP4, INT4): such a GEMM has no other calibrated path.
TRACED_GEMM_OPS = frozenset({"mm", "addmm", "linear", "matmul", "_scaled_mm", "scaled_mm", "cutlass_scaled_mm",
                             "_C::cutlass_scaled_mm", "fp8_gemm", "w8a8_block_fp8_matmul"})
_TRACED_LOW = ("fp8", "fp8_block", "fp4", "mxfp4", "int4")


def canonical_ops(table: KernelTable) -> KernelTable:
    """``table`` with traced low-precision GEMMs (:data:`TRACED_GEMM_OPS`) named ``gemm`` (the
    same table where there are none)."""
    op = table["op"]
    traced = np.isin(np.asarray(op, dtype=object).astype(str), list(TRACED_GEMM_OPS))
    if not traced.any():
        return table
    low = np.isin(work.canonical_dtypes(table["dtype"]).astype(str), _TRACED_LOW)
    hit = traced & low
    if not hit.any():
        return table
    out = KernelTable(table.as_dict(), n=len(table))
    out["op"] = np.where(hit, work.GEMM, op).astype(object)
    return out


def llm_rows(table: KernelTable) -> np.ndarray:
    """Rows the LLM model predicts: ``op`` is one of :data:`cascade.llm.work.LLM_OPS` with its
    shape columns set (a GEMM needs m, n, k and an LLM dtype; attention its heads; a MoE layer
    its tokens and experts; a collective its bytes and ranks)."""
    table = canonical_ops(table)
    op = table["op"]
    dtype = np.isin(work.canonical_dtypes(table["dtype"]).astype(str), work.LLM_DTYPES)
    gemm = (op == work.GEMM) & dtype & (table["m"] > 0) & (table["n"] > 0) & (table["k"] > 0)
    attn = (op == work.ATTENTION) & (table["heads"] > 0) & (table["head_dim"] > 0) & (table["batch"] > 0)
    moe = (op == work.MOE) & (table["tokens"] > 0) & (table["experts"] > 0) & (table["hidden"] > 0)
    coll = (op == work.COLLECTIVE) & (table["comm_bytes"] > 0) & (table["ranks"] > 0)
    return np.asarray(gemm | attn | moe | coll, dtype=bool)


def carry(t_src: np.ndarray, src: LlmTimes, tgt: LlmTimes) -> np.ndarray:
    """Target times from measured source times: ``t_src * model(target) / model(source)``
    (the target's model time where no source time was measured)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        pred = t_src * tgt.model_ns / src.model_ns
    ok = np.isfinite(pred) & (t_src > 0)
    return np.where(ok, pred, tgt.model_ns)


def require_calibrated_keys(table: KernelTable) -> None:
    """Refuse LLM rows whose enumerations are not known (a clear error naming the field)."""
    op = table["op"]
    phase = table["phase"]
    for i in np.flatnonzero(op == work.ATTENTION):
        if phase[i] not in ("prefill", "decode"):
            raise ValidationError(f"attention kernel {table['name'][i]!r}: phase must be 'prefill' or 'decode', "
                                  f"got {phase[i]!r}", field="phase")
    kv = work.canonical_dtypes(table["kv_dtype"])
    for i in np.flatnonzero((op == work.ATTENTION) & ~np.isin(kv.astype(str), ("", "bf16", "fp16", "fp8"))):
        raise ValidationError(f"attention kernel {table['name'][i]!r}: kv_dtype must be bf16, fp16 or fp8 "
                              f"(or empty: bf16), got {table['kv_dtype'][i]!r}", field="kv_dtype")
    coll = table["collective"]
    for i in np.flatnonzero(op == work.COLLECTIVE):
        if coll[i] not in work.COLLECTIVES:
            raise ValidationError(f"collective kernel {table['name'][i]!r}: collective must be one of "
                                  f"{', '.join(work.COLLECTIVES)}, got {coll[i]!r}", field="collective")


def describe(cal: LlmCalibration) -> dict[str, Any]:
    """A short JSON-able summary (id, digest, surfaces per GPU)."""
    per: dict[str, int] = {}
    for s in cal.surfaces:
        per[s.gpu] = per.get(s.gpu, 0) + 1
    return {"id": cal.id, "version": cal.version, "digest": cal.digest(), "surfaces": per,
            "source": cal.source, "heldout": cal.heldout}


def dumps(obj: Any) -> str:
    return json.dumps(obj, indent=2, sort_keys=True)


def report_family(table: KernelTable) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the protocol's (op, dtype) cell it belongs to (``cascade validate --llm``)."""
    n = len(table)
    if n == 0:
        return np.zeros(0, dtype=object), np.zeros(0, dtype=object)
    cols = (table["op"], work.canonical_dtypes(table["dtype"]), work.canonical_dtypes(table["kv_dtype"]),
            table["phase"], table["impl"], table["collective"])
    combo = np.zeros(n, dtype=np.int64)
    values: list[list[object]] = []
    for col in cols:
        uniq, codes = work.factorize(col)
        values.append(uniq)
        combo = combo * len(uniq) + codes
    combos, back = work.factorize(combo)
    fams: list[str] = []
    dts: list[str] = []
    for code in np.asarray(combos, dtype=np.int64).tolist():
        parts = []
        for uniq in reversed(values):
            parts.append(str(uniq[int(code) % len(uniq)]))
            code = int(code) // len(uniq)
        o, d, kv, phase, impl, coll = reversed(parts)
        if o == work.GEMM or o == work.MOE:
            fams.append("gemm" if o == work.GEMM else "moe")
            dts.append(d)
        elif o == work.ATTENTION:
            fams.append(f"attention_{phase}")
            dts.append(kv or "bf16")
        elif o == work.COLLECTIVE:
            custom = impl.startswith("vllm_custom")
            fams.append(("custom_all_reduce_" + impl.removeprefix("vllm_custom_")) if custom else f"nccl_{coll}")
            dts.append("")
        else:
            fams.append("")
            dts.append("")
    return np.asarray(fams, dtype=object)[back], np.asarray(dts, dtype=object)[back]


@dataclass(frozen=True, slots=True)
class ExpectedError:
    """The protocol's measured error for a set of LLM rows on one (source, target)."""

    mape_pct: float | None
    worst_pct: float | None
    cells: int
    basis: str


def expected_error(cal: LlmCalibration, table: KernelTable, source_id: str | None, target: GPUSpec) -> ExpectedError:
    """Row-weighted MAPE of the protocol cells matching each LLM row's family, dtype and GPUs.

    Target calibrated: its cells from this source (any source when none). Target without its
    own surfaces: the cells of the GPU it borrows from scored with that GPU left out (a
    calibrated GPU predicted from a relative's surface), so the figure is widened as the
    situation is."""
    rows = llm_rows(table)
    if not rows.any() or not cal.metrics:
        return ExpectedError(None, None, 0, "no LLM-kernel protocol figures recorded")
    sub = canonical_ops(table.take(np.flatnonzero(rows)))
    fam, dt = report_family(sub)
    own_gpus = {s.gpu for s in cal.surfaces}
    calibrated = target.id in own_gpus
    if calibrated:
        stand_ins, variant = {target.id}, "calibrated"
    else:
        order = FAMILY_ORDER.get(software_family(target), ())
        peers = sorted({(order.index(software_family(s)) if software_family(s) in order else 99, s.gpu)
                        for s in cal.surfaces})
        stand_in = peers[0][1] if peers else ""
        variant = "target left out"
        fam_of = {s.gpu: software_family(s) for s in cal.surfaces}
        if fam_of.get(stand_in) == software_family(target):
            # it borrows a sibling of its own family: the figure of calibrated GPUs predicted from
            # a sibling of theirs (the H200 from the H100's surfaces and the other way round)
            twins = {g for g in fam_of if sum(1 for h in fam_of if fam_of[h] == fam_of[g]) > 1}
            stand_ins = twins or {stand_in}
        else:  # across families: the stand-in's own figure with its surfaces left out
            stand_ins = {stand_in}
    stand_in = ", ".join(sorted(stand_ins))
    total = 0.0
    count = 0
    worst = 0.0
    cells = 0
    for f, d in sorted(set(zip(fam.tolist(), dt.tolist(), strict=True))):
        k = int(np.sum((fam == f) & (dt == d)))
        match = [m for m in cal.metrics if m.get("op") == f and m.get("target") in stand_ins
                 and m.get("variant") == variant and (not d or m.get("dtype") == d)
                 and (source_id is None or m.get("source") == source_id)]
        if not match and source_id is not None:  # another source into the same targets
            match = [m for m in cal.metrics if m.get("op") == f and m.get("target") in stand_ins
                     and m.get("variant") == variant and (not d or m.get("dtype") == d)]
        if not match:
            continue
        n = sum(int(m["n"]) for m in match)
        mape = sum(float(m["mape_pct"]) * int(m["n"]) for m in match) / max(n, 1)
        total += mape * k
        count += k
        worst = max(worst, *(float(m["mape_pct"]) for m in match))
        cells += len(match)
    if count == 0:
        return ExpectedError(None, None, 0, f"no LLM-kernel protocol cell covers these rows into {target.id}")
    what = (f"held-out shapes of {cal.source} into {target.id}" if calibrated else
            f"{target.id} has no measured surfaces: cells into {stand_in}, each with its own surfaces left out")
    return ExpectedError(round(total / count, 2), round(worst, 2), cells,
                         f"cascade validate --llm --heldout ({what}; {count} of {len(table)} rows)")
