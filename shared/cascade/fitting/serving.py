"""`cascade validate --serving`: end-to-end serving measurements (TTFT, TPOT) predicted from
the served model's config alone (:mod:`cascade.llm.describe` + the serving simulator), with
no trace and nothing fitted on the measurements.

The folder is laid out like ``measured/llm-kernels/``: ``serving.csv`` (AIConfigurator's
silicon sample: one row per deployment and load) and ``model_configs/`` holding each model's
``config.json`` with ``model_map.csv`` mapping ``model_path`` to its file.

Each aggregated (``mode`` = ``agg``) row becomes one closed-loop scenario:

- GPU: ``system`` (``h100_sxm`` -> SM90_H100, ``h200_sxm`` -> SM90_H200, else any spec alias);
- quantisation: ``gemm_quant_mode`` (else ``precision``; empty: bf16) for the linear layers,
  ``moe_quant_mode`` for the experts, except that a checkpoint's own ``quantization_config``
  decides where it names one (FP8 with ``weight_block_size`` -> fp8_block; ``mxfp4`` ->
  MXFP4 experts with BF16 attention, as vLLM serves gpt-oss); KV cache bf16 (not recorded);
- parallelism: ``tp_size`` GPUs, ``moe_ep_size`` of them splitting the experts; where the MoE
  split (``moe_tp_size`` x ``moe_ep_size``) covers more GPUs than the attention's ``tp_size``,
  attention data parallelism (vLLM ``--data-parallel-size``): dp = MoE GPUs / tp engines of
  tp GPUs each, stepping together, simulated as one group
  (:func:`~cascade.serving.description.data_parallel`), each rank the row's engine limits;
- load: ``silicon_concurrency=N`` of ``silicon_data_source`` (else ``batch_size``) clients in
  a closed loop, each request ``isl`` tokens in and ``osl`` out, ``requests_per_client`` x N
  measured requests (10 N, the sweeps' request count), the clients started together as a
  benchmark starts them (``clients_start``; ``staggered``: each at its own phase), after 2 x N
  warm-up requests run to their end and left out (the measured clients then start together
  on an idle engine, as aiperf and `vllm bench serve` run a warm-up);
- engine limits (``engine``): ``aiconfigurator`` (default), the deployment as AIConfigurator's
  generator configures an aggregated vLLM or TensorRT-LLM engine for a benchmark
  (``rule_plugin/benchmark/{vllm,trtllm}.rule``: ``max_num_tokens = max_batch_size + isl +
  1500``, mapped to vLLM's ``--max-num-batched-tokens``, and ``max_batch_size`` to
  ``--max-num-seqs``; ``batch_size`` is the row's, at least its clients): the token budget of a step and the
  sequences it holds; SGLang rows (whose rule sets no such budget) run SGLang's own scheduler
  with its defaults (:class:`~cascade.serving.schedulers.Sglang`: passes all prefill or all
  decode, admission reserving output room) and its KV sizing (:func:`~cascade.serving.described.
  sglang_kv`: ``mem_fraction_static`` for the GPU, TP degree and the row's release);
  ``defaults``: vLLM's API-server defaults for the row's GPU for every row
  (max_num_batched_tokens 8192, max_num_seqs 1024 on GPUs of 70 GiB and more but A100s; 2048 /
  256 on others);
- kernels: the LLM calibration's vLLM collector nearest the row's ``backend_version`` times the
  steps first (:func:`collector_of`: 0.12 rows on the 0.14 measurements where the GPU has them);
- engine: vLLM's async scheduling where the row's ``backend_version`` turns it on by default
  (0.14 and later, or no version recorded: :data:`ASYNC_SCHEDULING_FROM`), else synchronous;
  SGLang's and TensorRT-LLM's overlap schedulers (on by default) alike;
- compared: the simulated mean TTFT and mean TPOT with ``silicon_ttft_ms`` /
  ``silicon_tpot_ms`` (the source does not say whether those are means or medians).

Baselines beside (both need nothing measured of the row itself):

- ``roofline``: TTFT = the prompt's FLOPs (2 x active parameters x isl, 2 x layers x isl^2 x
  heads x head_dim of attention) at the GPU's dense peak for the dtype over the tp GPUs;
  TPOT = the weights on one GPU plus the KV cache the batch reads at the mid-point of the
  output, at its DRAM bandwidth;
- ``group mean``: the mean measured value of the other rows of the same (backend, model, GPU)
  (leave-one-out).

vLLM rows are what the model is for (its operator times are vLLM's); SGLang and TRT-LLM rows
are predicted on the same kernels (SGLang's with its scheduler) and reported apart, per backend.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable, Mapping
from typing import Any, Literal

import msgspec
import numpy as np

from cascade.errors import ValidationError
from cascade.gpus.registry import GPURegistry
from cascade.gpus.spec import GPUSpec
from cascade.llm import work
from cascade.llm.describe import ModelDescription, describe_model
from cascade.llm.model import COLLECTOR_DEFAULT, LlmCalibration, without_gpus
from cascade.serving.arrivals import Fixed
from cascade.serving.described import DescribedStepCost, described_kv, group_kv, sglang_kv
from cascade.serving.description import data_parallel
from cascade.serving.scenario import REQUESTS_PER_CLIENT, ClientsStart, Scenario, run_scenario
from cascade.serving.schedulers import (
    LARGE_GPU_DEFAULTS,
    Sglang,
    Vllm,
    device_of,
    vllm_batch_defaults,
)

#: ``system`` column -> GPU spec id.
SYSTEMS: dict[str, str] = {"h100_sxm": "SM90_H100", "h200_sxm": "SM90_H200", "b200_sxm": "SM100_B200"}
MAX_NUM_BATCHED_TOKENS, MAX_NUM_SEQS = LARGE_GPU_DEFAULTS
#: Tokens beyond a step's prompt and batch in AIConfigurator's generated aggregated engines
#: (``agg max_num_tokens = max_batch_size + isl + 1500``).
AIC_TOKEN_MARGIN = 1500
#: Backends whose aggregated engines that rule sizes.
AIC_BUDGET_BACKENDS = ("vllm", "trtllm")
EngineLimits = Literal["aiconfigurator", "defaults"]
#: First vLLM release whose engine resolves an unset ``async_scheduling`` to on (vLLM PR #27614,
#: the last item of its async-scheduling plan, issue #27679); the 0.11 / 0.12 series schedule
#: synchronously unless told otherwise.
ASYNC_SCHEDULING_FROM = (0, 14)
#: A row's measured TPOT under this fraction of the slowest TPOT its deployment (backend, model,
#: GPU, TP, EP, ISL, OSL) measured at a lower concurrency marks the load as not reached.
LOAD_NOT_REACHED = 0.7

_CONCURRENCY = re.compile(r"silicon_concurrency=(\d+)")


class ServingRow(msgspec.Struct, frozen=True, kw_only=True):
    """One measured deployment and its prediction."""

    id: str
    backend: str
    model: str
    gpu: str
    quant: str
    moe_quant: str
    tp: int
    ep: int
    dp: int = 1
    """Attention data-parallel engines (each tp GPUs; the experts over all dp x tp)."""
    collector: str = COLLECTOR_DEFAULT
    """Whose kernel measurements timed its steps first (:func:`collector_of`)."""
    concurrency: int
    isl: int
    osl: int
    ttft_ms: float
    """Measured."""
    tpot_ms: float
    pred_ttft_ms: float
    """Simulated mean."""
    pred_tpot_ms: float
    roofline_ttft_ms: float
    roofline_tpot_ms: float
    preemptions: int = 0
    max_num_batched_tokens: int = MAX_NUM_BATCHED_TOKENS
    """The engine limits the row was predicted with (:func:`engine_limits`)."""
    max_num_seqs: int = MAX_NUM_SEQS
    load_not_reached: bool = False
    """Measured TPOT below :data:`LOAD_NOT_REACHED` of the same deployment's at a lower
    concurrency: more clients cannot make a GPU-bound decode faster, so the engine did not run
    the load the row names (clients or admission holding requests back); scored apart."""


class ServingScore(msgspec.Struct, frozen=True, kw_only=True):
    """MAPE of one (backend, model, GPU) group."""

    backend: str
    model: str
    gpu: str
    n: int
    ttft_mape_pct: float
    tpot_mape_pct: float
    ttft_median_ape_pct: float
    tpot_median_ape_pct: float
    roofline_ttft_mape_pct: float
    roofline_tpot_mape_pct: float
    group_mean_ttft_mape_pct: float | None
    """Leave-one-out mean of the group's other rows (None: a group of one)."""
    group_mean_tpot_mape_pct: float | None
    n_load_not_reached: int = 0
    """Rows whose measured TPOT says the engine did not run the load they name (see
    :attr:`ServingRow.load_not_reached`)."""
    ttft_mape_pct_reached: float | None = None
    """TTFT / TPOT MAPE over the rest (None: none left)."""
    tpot_mape_pct_reached: float | None = None


class ServingReport(msgspec.Struct, frozen=True, kw_only=True):
    scores: list[ServingScore]
    rows: list[ServingRow]
    skipped: list[str]


def read_rows(text: str) -> list[dict[str, str]]:
    """The rows of ``serving.csv``; ValidationError names a missing column."""
    reader = csv.DictReader(io.StringIO(text))
    need = ("backend", "model_path", "system", "mode", "isl", "osl", "tp_size", "silicon_ttft_ms",
            "silicon_tpot_ms")
    for col in need:
        if col not in (reader.fieldnames or []):
            raise ValidationError(f"serving.csv has no column {col!r}", field=col)
    return list(reader)


def read_model_map(text: str) -> dict[str, str]:
    """``model_path`` -> config file name, from ``model_map.csv``."""
    reader = csv.DictReader(io.StringIO(text))
    for col in ("model_path", "config_files"):
        if col not in (reader.fieldnames or []):
            raise ValidationError(f"model_map.csv has no column {col!r}", field=col)
    return {r["model_path"]: r["config_files"].split(";")[0].strip() for r in reader}


def _int(row: Mapping[str, str], col: str, default: int | None = None) -> int:
    v = (row.get(col) or "").strip()
    if not v:
        if default is None:
            raise ValidationError(f"row {row.get('id', '?')}: empty", field=col)
        return default
    try:
        return int(float(v))
    except ValueError:
        raise ValidationError(f"row {row.get('id', '?')}: expected a number, got {v!r}", field=col) from None


def _quants(row: Mapping[str, str], config: Mapping[str, Any]) -> tuple[str, str]:
    """(linear-layer dtype, expert dtype) of a row (see the module docstring)."""
    qc = config.get("quantization_config")
    if isinstance(qc, Mapping):
        method = str(qc.get("quant_method", "")).lower()
        if method == "mxfp4":
            return "bf16", "mxfp4"
        if method == "fp8" and qc.get("weight_block_size"):
            return "fp8_block", "fp8_block"
    gemm = work.canonical_dtype(row.get("gemm_quant_mode") or row.get("precision") or "") or "bf16"
    moe = work.canonical_dtype(row.get("moe_quant_mode") or "") or gemm
    for q in (gemm, moe):
        if q not in work.LLM_DTYPES:
            raise ValidationError(f"row {row.get('id', '?')}: unknown quantisation {q!r}", field="gemm_quant_mode")
    return gemm, moe


def _version(text: str | None) -> tuple[int, int] | None:
    found = re.match(r"\s*(\d+)\.(\d+)", text or "")
    return (int(found.group(1)), int(found.group(2))) if found else None


def _release(text: str | None) -> tuple[int, int, int] | None:
    found = re.match(r"\s*(\d+)\.(\d+)\.(\d+)", text or "")
    return (int(found.group(1)), int(found.group(2)), int(found.group(3))) if found else None


def collector_of(row: Mapping[str, str], cal: LlmCalibration) -> str:
    """Whose kernel measurements time a vLLM row first: the calibration's vLLM collector
    (``vllm-0.14``, ``vllm-0.24``) nearest the row's ``backend_version`` (the newer on a tie;
    the default where no version is recorded or the backend is not vLLM). A GPU without that
    collector's surfaces uses its own others (:func:`cascade.llm.model.choose_surface`)."""
    version = _version(row.get("backend_version"))
    if (row.get("backend") or "vllm") != "vllm" or version is None:
        return COLLECTOR_DEFAULT
    known = {v: c for c in {s.collector for s in cal.surfaces} if c.startswith("vllm-")
             and (v := _version(c.removeprefix("vllm-"))) is not None}
    if not known:
        return COLLECTOR_DEFAULT
    nearest = min(known, key=lambda v: (abs((v[0] - version[0]) * 100 + v[1] - version[1]), -v[0], -v[1]))
    return known[nearest]


def async_scheduling_of(row: Mapping[str, str]) -> bool:
    """Whether the row's engine built each step while the last one ran: vLLM by its version's
    default (none recorded: the current default, on); SGLang's and TensorRT-LLM's overlap
    schedulers are on by default."""
    if (row.get("backend") or "vllm") != "vllm":
        return True
    found = re.match(r"\s*(\d+)\.(\d+)", row.get("backend_version") or "")
    if not found:
        return True
    return (int(found.group(1)), int(found.group(2))) >= ASYNC_SCHEDULING_FROM


def concurrency_of(row: Mapping[str, str]) -> int:
    """``silicon_concurrency=N`` of silicon_data_source, else batch_size."""
    m = _CONCURRENCY.search(row.get("silicon_data_source") or "")
    return int(m.group(1)) if m else _int(row, "batch_size")


def engine_limits(row: Mapping[str, str], engine: EngineLimits, spec: GPUSpec | None = None) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) of the row's engine (see the module's ``engine``);
    the defaults: vLLM's API server's on ``spec`` (:func:`vllm_batch_defaults`; an 80 GB H100's
    without one)."""
    if engine == "defaults" or row.get("backend") not in AIC_BUDGET_BACKENDS:
        if spec is None:
            return MAX_NUM_BATCHED_TOKENS, MAX_NUM_SEQS
        return vllm_batch_defaults(*device_of(spec))
    # a batch below the clients is a per-rank figure (the data's 5 TRT-LLM gpt-oss rows record
    # concurrency / tp): the engine holds every client
    batch = max(_int(row, "batch_size", 0), concurrency_of(row))
    return batch + _int(row, "isl") + AIC_TOKEN_MARGIN, batch


def roofline_ms(desc: ModelDescription, spec: GPUSpec, isl: int, osl: int, concurrency: int) -> tuple[float, float]:
    """(TTFT, TPOT) of the roofline baseline, ms."""
    math_dtype = work.MATH_DTYPE.get(desc.quant, "bf16")
    peak = spec.tensor_flops(math_dtype) or spec.tensor_flops("bf16")
    attn = 2 * desc.layers * isl * isl * desc.heads * desc.head_dim
    ttft = (2 * desc.params(active=True) * isl + attn) / (desc.tp * peak) * 1e3
    kv = concurrency * (isl + osl / 2) * desc.kv_bytes_per_token()
    tpot = (desc.weight_bytes_per_gpu() + kv) / spec.bandwidth_bps * 1e3
    return ttft, tpot


def _ape(pred: np.ndarray, meas: np.ndarray) -> np.ndarray:
    return np.asarray(np.abs(pred - meas) / meas * 100.0, dtype=float)


def evaluate(rows: list[dict[str, str]], configs: Mapping[str, Mapping[str, Any]], reg: GPURegistry,
             cal: LlmCalibration, *, backends: tuple[str, ...] = ("vllm",), requests_per_client: int = REQUESTS_PER_CLIENT,
             every: int = 1, log: Callable[[str], None] | None = None, left_out: bool = False,
             clients_start: ClientsStart = "together", engine: EngineLimits = "aiconfigurator") -> ServingReport:
    """Predict every ``agg`` row of the chosen ``backends`` (every ``every``-th of each group
    when subsampling) and score it per (backend, model, GPU)."""
    skipped: list[str] = []
    out: list[ServingRow] = []
    sources: dict[tuple[Any, ...], DescribedStepCost] = {}
    digest = cal.digest()
    seen: dict[tuple[str, str, str], int] = {}
    for row in rows:
        if row.get("mode") != "agg" or row.get("backend") not in backends:
            continue
        rid = row.get("id", "?")
        model = row["model_path"]
        group = (row["backend"], model, row["system"])
        seen[group] = seen.get(group, 0) + 1
        if (seen[group] - 1) % every:
            continue
        try:
            ttft, tpot = float(row["silicon_ttft_ms"]), float(row["silicon_tpot_ms"])
        except ValueError:
            skipped.append(f"{rid}: no measured TTFT/TPOT")
            continue
        config = configs.get(model)
        if config is None:
            skipped.append(f"{rid}: no config for {model}")
            continue
        spec = reg.resolve(SYSTEMS.get(row["system"], row["system"]))
        if spec is None:
            skipped.append(f"{rid}: unknown system {row['system']!r}")
            continue
        tp = _int(row, "tp_size", 1)
        ep = max(1, _int(row, "moe_ep_size", 1))
        moe_tp = max(1, _int(row, "moe_tp_size", 1))
        is_moe = bool(config.get("num_experts") or config.get("num_local_experts"))
        dp = 1
        if is_moe and moe_tp * ep != tp and _int(row, "moe_tp_size", 0) > 0:
            if (moe_tp * ep) % tp:
                skipped.append(f"{rid}: MoE over {moe_tp * ep} GPUs is not a multiple of the attention's tp={tp}")
                continue
            dp = moe_tp * ep // tp  # attention data parallelism: dp engines of tp GPUs, MoE over all
        if _int(row, "pp_size", 1) > 1 or _int(row, "attention_dp_size", 1) > 1:
            skipped.append(f"{rid}: pipeline or attention data parallelism is not modelled")
            continue
        quant, moe_quant = _quants(row, config)
        n = concurrency_of(row)
        isl, osl = _int(row, "isl"), _int(row, "osl")
        try:
            desc = describe_model(config, quant=quant, moe_quant=moe_quant, kv_dtype="bf16", tp=tp,
                                  ep=ep if is_moe else 1, dp=dp)
        except ValidationError as exc:
            skipped.append(f"{rid}: {exc}")
            continue
        overlap = async_scheduling_of(row)
        budget, seqs = engine_limits(row, engine, spec)
        collector = collector_of(row, cal)
        key = (model, spec.id, quant, moe_quant, tp, ep, dp, overlap, budget, seqs, collector)
        source = sources.get(key)
        if source is None:
            # left_out: the GPU's own LLM surfaces removed, as for a GPU never measured
            use = without_gpus(cal, frozenset({spec.id})) if left_out else cal
            source = DescribedStepCost(desc, spec, use, max_tokens=budget, max_seqs=seqs,
                                       calibration_digest=digest, async_scheduling=overlap, collector=collector)
            sources[key] = source
        try:
            sched: Vllm | Sglang
            if row["backend"] == "sglang":  # SGLang's own scheduler and memory rule
                kv = group_kv(sglang_kv(desc, spec, version=_release(row.get("backend_version"))), dp)
                sched = Sglang()
            else:
                kv = group_kv(described_kv(desc, spec, max_num_batched_tokens=budget, max_num_seqs=seqs), dp)
                sched = Vllm(max_num_batched_tokens=budget, max_num_seqs=seqs, async_scheduling=overlap)
            sc = data_parallel(Scenario(
                concurrency=n, n_requests=requests_per_client * n, prompt=Fixed(tokens=isl),
                clients_start=clients_start, output=Fixed(tokens=osl), scheduler=sched), dp)
            res = run_scenario(sc, source, kv)
        except ValidationError as exc:
            skipped.append(f"{rid}: {exc}")
            continue
        rt, rp = roofline_ms(desc, spec, isl, osl, max(1, n // dp))
        out.append(ServingRow(id=rid, backend=row["backend"], model=model, gpu=spec.id, quant=quant,
                              moe_quant=moe_quant, tp=tp, ep=ep, dp=dp, concurrency=n, isl=isl, osl=osl, ttft_ms=ttft,
                              tpot_ms=tpot, pred_ttft_ms=res.ttft_ms.mean, pred_tpot_ms=res.tpot_ms.mean,
                              roofline_ttft_ms=rt, roofline_tpot_ms=rp, preemptions=res.preemptions,
                              max_num_batched_tokens=budget, max_num_seqs=seqs, collector=collector))
        if log is not None:
            log(f"{rid}: TTFT {ttft:.1f} -> {res.ttft_ms.mean:.1f} ms, TPOT {tpot:.2f} -> {res.tpot_ms.mean:.2f} ms")
    out = flag_load_not_reached(out)
    return ServingReport(scores=score(out), rows=out, skipped=skipped)


def flag_load_not_reached(rows: list[ServingRow]) -> list[ServingRow]:
    """Each row with :attr:`ServingRow.load_not_reached` set from its deployment's other rows."""
    slowest: dict[tuple[Any, ...], list[tuple[int, float]]] = {}
    for r in rows:
        slowest.setdefault((r.backend, r.model, r.gpu, r.tp, r.ep, r.isl, r.osl), []).append((r.concurrency, r.tpot_ms))
    out = []
    for r in rows:
        lower = [t for c, t in slowest[(r.backend, r.model, r.gpu, r.tp, r.ep, r.isl, r.osl)] if c < r.concurrency]
        flag = bool(lower) and r.tpot_ms < LOAD_NOT_REACHED * max(lower)
        out.append(msgspec.structs.replace(r, load_not_reached=flag) if flag else r)
    return out


def score(rows: list[ServingRow]) -> list[ServingScore]:
    """MAPE per (backend, model, GPU), the baselines beside."""
    groups: dict[tuple[str, str, str], list[ServingRow]] = {}
    for r in rows:
        groups.setdefault((r.backend, r.model, r.gpu), []).append(r)
    out = []
    for (backend, model, gpu), rs in sorted(groups.items()):
        mt = np.array([r.ttft_ms for r in rs])
        mp = np.array([r.tpot_ms for r in rs])
        et = _ape(np.array([r.pred_ttft_ms for r in rs]), mt)
        ep = _ape(np.array([r.pred_tpot_ms for r in rs]), mp)
        bt = _ape(np.array([r.roofline_ttft_ms for r in rs]), mt)
        bp = _ape(np.array([r.roofline_tpot_ms for r in rs]), mp)
        gt = gp = None
        if len(rs) > 1:
            k = len(rs)
            gt = float(np.mean(_ape((mt.sum() - mt) / (k - 1), mt)))
            gp = float(np.mean(_ape((mp.sum() - mp) / (k - 1), mp)))
        ok = np.array([not r.load_not_reached for r in rs])
        out.append(ServingScore(backend=backend, model=model, gpu=gpu, n=len(rs), ttft_mape_pct=float(et.mean()),
                                tpot_mape_pct=float(ep.mean()), ttft_median_ape_pct=float(np.median(et)),
                                tpot_median_ape_pct=float(np.median(ep)), roofline_ttft_mape_pct=float(bt.mean()),
                                roofline_tpot_mape_pct=float(bp.mean()), group_mean_ttft_mape_pct=gt,
                                group_mean_tpot_mape_pct=gp, n_load_not_reached=int((~ok).sum()),
                                ttft_mape_pct_reached=float(et[ok].mean()) if ok.any() else None,
                                tpot_mape_pct_reached=float(ep[ok].mean()) if ok.any() else None))
    return out


def parse_configs(model_map: Mapping[str, str], read: Callable[[str], str]) -> dict[str, dict[str, Any]]:
    """Each model's config, ``read(file name)`` giving the file's text (the caller does I/O)."""
    out: dict[str, dict[str, Any]] = {}
    for model, name in model_map.items():
        try:
            out[model] = json.loads(read(name))
        except (json.JSONDecodeError, ValueError) as exc:
            raise ValidationError(f"{name} is not JSON: {exc}", field="model_configs") from None
    return out
