"""`cascade scenario`: simulate serving traffic on replicas from a step-time model."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import msgspec

from cascade.errors import ValidationError
from cascade.serving.arrivals import Burst, Constant, Gamma, Poisson, Trace, parse_length
from cascade.serving.capacity import CapacityResult, max_rate, min_replicas
from cascade.serving.described import DescribedStepCost
from cascade.serving.kvcache import MODEL_SHAPES, KVConfig
from cascade.serving.metrics import Slo, records_csv
from cascade.serving.report import format_summary
from cascade.serving.routers import ROUTERS
from cascade.serving.scenario import Scenario, ScenarioResult, run_scenario
from cascade.serving.schedulers import Sglang, Static, Vllm
from cascade.serving.stepmodel import StepTimeModel, records_from_table
from cascade.serving.synthetic import synthetic_step_model
from cascade.tableio import read_table


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser(
        "scenario", help="simulate request traffic (TTFT, TPOT, ITL, throughput) on replicas",
        description="Simulate serving traffic with a step-time model; prints a summary laid "
                    "out like `vllm bench serve`.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--step-model", metavar="FILE.json", help="StepTimeModel JSON")
    src.add_argument("--from-table", metavar="FILE.csv",
                     help="kernel-table CSV with step columns and duration_ns (summed per step)")
    src.add_argument("--synthetic", action="store_true",
                     help="a synthetic Llama-2-7B/H100-like step model (not a measurement)")
    src.add_argument("--hf-config", metavar="config.json",
                     help="describe the model from its Hugging Face config.json and time every step at "
                          "its shape on --gpu (LLM-operator model, no trace); the KV cache from the GPU's memory")
    h = p.add_argument_group("described model (--hf-config)")
    h.add_argument("--gpu", help="GPU spec id or alias (SM100_B200, 'NVIDIA B200', h100, ...)")
    h.add_argument("--tp", type=int, default=1, help="tensor-parallel GPUs of one replica (default 1)")
    h.add_argument("--ep", type=int, default=1,
                   help="expert-parallel ranks among the MoE layers' GPUs (tp, or dp x tp with --dp; default 1: "
                        "experts split by TP)")
    h.add_argument("--dp", type=int, default=1,
                   help="attention data-parallel ranks of one replica (vllm serve --data-parallel-size): each "
                        "rank tp GPUs with its own scheduler and KV cache, the MoE layers over all dp x tp GPUs "
                        "(with --ep dp x tp: vLLM's --enable-expert-parallel); default 1"),
    h.add_argument("--quant", default=None, choices=["bf16", "fp8", "fp8-block", "fp4", "int4", "mxfp4"],
                   help="dtype of the linear layers (default: the checkpoint's own, from the config's "
                        "quantization_config: FP8 with weight blocks -> fp8-block, mxfp4 -> MXFP4 experts; else bf16)")
    h.add_argument("--moe-quant", default=None, choices=["bf16", "fp8", "fp8-block", "fp4", "int4", "mxfp4"],
                   help="dtype of the experts (default: --quant)")
    h.add_argument("--kv-dtype", default="bf16", choices=["bf16", "fp8"])
    h.add_argument("--llm-calibration", metavar="FILE", help="LLM calibration .npz (default: packaged)")
    p.add_argument("--save-step-model", metavar="FILE.json", help="write the step model used")
    g = p.add_argument_group("traffic")
    g.add_argument("--arrival", choices=["poisson", "gamma", "constant", "burst"],
                   default="poisson")
    g.add_argument("--rate", type=float, default=1.0, help="requests per second (default 1)")
    g.add_argument("--cv", type=float, default=1.0, help="gamma: coefficient of variation")
    g.add_argument("--trace", metavar="FILE.csv",
                   help="replay arrived_at,prompt_tokens,output_tokens (overrides --arrival)")
    g.add_argument("--requests", type=int,
                   help="number of requests measured (default 1000; with --concurrency N: 10 x N, after the warm-up's)")
    g.add_argument("--concurrency", type=int, default=None, metavar="N",
                   help="closed loop: N clients, each sending its next request when its previous one "
                        "finished (vllm bench serve --max-concurrency N); --arrival/--rate are ignored")
    g.add_argument("--warmup", type=int, default=None, metavar="N",
                   help="requests simulated first and left out of every figure, as a benchmark's warm-up "
                        "(default: 2 x --concurrency in a closed loop, else 0); in a closed loop they run to their "
                        "end, then the clients start together again, as aiperf and vllm bench serve run it")
    g.add_argument("--clients-start", choices=["together", "staggered"], default="together",
                   help="with --concurrency: together (default), every client's first request at t=0 as a "
                        "serving benchmark starts them; staggered, each client at its own phase")
    g.add_argument("--duration", type=float, help="seconds of traffic instead of --requests")
    g.add_argument("--prompt", default=None,
                   help="prompt tokens: N | uniform:LO:HI | lognormal:median=M,p90=P | "
                        "lognormal:mean=M,sigma=S | trace (default 128)")
    g.add_argument("--output", default=None, help="output tokens, same forms (default 128)")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--max-context", type=int, default=None, metavar="TOKENS",
                   help="refuse requests longer (prompt + output) than this; default: the context "
                        "window of --model; 0: no check")
    s = p.add_argument_group("serving")
    s.add_argument("--replicas", type=int, default=1)
    s.add_argument("--router", choices=ROUTERS.names(), default="round_robin")
    s.add_argument("--scheduler", choices=["vllm", "sglang", "static"], default="vllm",
                   help="vllm: mixed chunked-prefill steps; sglang: SGLang's passes (prefill first, never "
                        "beside a decode; admission reserving output room; its KV sizing with --hf-config); "
                        "static: fixed batches")
    s.add_argument("--chunked-prefill-size", type=int, default=None, metavar="TOKENS",
                   help="sglang: prompt tokens one prefill pass takes (default 8192)")
    s.add_argument("--max-num-batched-tokens", type=int, default=None, metavar="TOKENS",
                   help="token budget of one step (default: vLLM's for the GPU, 8192 on GPUs of 70 GiB and "
                        "more but A100s, else 2048)")
    s.add_argument("--max-num-seqs", type=int, default=None, metavar="N",
                   help="most requests running at once (default: vLLM's for the GPU, 1024 on GPUs of 70 GiB "
                        "and more but A100s, else 256; sglang: its max_running_requests, default half the KV "
                        "tokens, at most 4096)")
    s.add_argument("--no-chunked-prefill", action="store_true")
    s.add_argument("--no-async-scheduling", action="store_true",
                   help="vLLM without async scheduling (the 0.12 series, or --no-async-scheduling there): a "
                        "request arriving during a step joins the next one, and a step's host work adds to its "
                        "GPU time instead of hiding behind it")
    s.add_argument("--batch-size", type=int, default=8, help="static scheduler batch size")
    s.add_argument("--model", choices=sorted(MODEL_SHAPES), default="llama-2-7b",
                   help="model shape for the KV-cache size")
    s.add_argument("--gpu-memory-gib", type=float, default=80.0)
    s.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    s.add_argument("--block-size", type=int, default=16)
    s.add_argument("--num-gpu-blocks", type=int, help="override the KV block count")
    o = p.add_argument_group("output")
    o.add_argument("--slo", default="", help="e.g. ttft_ms=200,tpot_ms=50,e2e_ms=5000,attainment=0.99")
    o.add_argument("--capacity", nargs="?", const="rate", choices=["rate", "replicas"],
                   help="search the highest rate (default) or fewest replicas meeting --slo")
    o.add_argument("--json", action="store_true", help="print the result as JSON")
    o.add_argument("--records", metavar="OUT.csv|OUT.json", help="write per-request records")
    p.set_defaults(func=run)


def parse_slo(text: str) -> Slo:
    """'ttft_ms=200,tpot_ms=50' -> Slo; errors name the field."""
    fields: dict[str, float] = {}
    for part in filter(None, (x.strip() for x in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep or key not in ("ttft_ms", "tpot_ms", "e2e_ms", "attainment"):
            raise ValidationError(f"expected ttft_ms=, tpot_ms=, e2e_ms= or attainment=, got {part!r}",
                                  field="slo")
        try:
            fields[key] = float(value)
        except ValueError:
            raise ValidationError(f"{value!r} is not a number", field=f"slo.{key}") from None
    return Slo(**fields)


def load_step_model(args: argparse.Namespace) -> StepTimeModel:
    if args.synthetic:
        return synthetic_step_model()
    if args.step_model:
        path = Path(args.step_model)
        if not path.is_file():
            raise ValidationError(f"{path} does not exist", field="--step-model")
        return StepTimeModel.from_json(path.read_bytes(), source=str(path))
    table = read_table(args.from_table)
    return StepTimeModel.fit(records_from_table(table), source=str(args.from_table))


def build_scenario(args: argparse.Namespace) -> Scenario:
    arrival: Any
    if args.trace:
        arrival = Trace(path=args.trace)
    else:
        arrival = {"poisson": Poisson(rate=args.rate), "gamma": Gamma(rate=args.rate, cv=args.cv),
                   "constant": Constant(rate=args.rate), "burst": Burst()}[args.arrival]
    scheduler: Any
    if args.scheduler == "static":
        scheduler = Static(batch_size=args.batch_size)
    elif args.scheduler == "sglang":
        scheduler = Sglang(**({"chunked_prefill_size": args.chunked_prefill_size} if args.chunked_prefill_size else {}),
                           max_running_requests=args.max_num_seqs)
    else:
        scheduler = Vllm(max_num_batched_tokens=args.max_num_batched_tokens, max_num_seqs=args.max_num_seqs,
                         enable_chunked_prefill=not args.no_chunked_prefill,
                         async_scheduling=not args.no_async_scheduling)
    n = args.requests
    if n is None and args.duration is None and not args.trace and args.concurrency is None:
        n = 1000
    return Scenario(concurrency=args.concurrency,
        arrival=arrival, n_requests=n, duration_s=args.duration, replicas=args.replicas,
        prompt=parse_length(args.prompt, "prompt") if args.prompt else None,
        output=parse_length(args.output, "output") if args.output else None,
        router={"kind": args.router}, scheduler=scheduler, slo=parse_slo(args.slo),
        seed=args.seed, include_records=bool(args.records), max_context_tokens=_max_context(args),
        clients_start=args.clients_start, warmup_requests=args.warmup)


def _max_context(args: argparse.Namespace) -> int | None:
    """--max-context, else the context window of --hf-config's model (max_position_embeddings) or
    of --model (None: no check)."""
    from cascade.serving.contexts import context_length

    if args.max_context is not None:
        return args.max_context if args.max_context > 0 else None
    if getattr(args, "hf_config", None):
        import json

        config = json.loads(Path(args.hf_config).read_text())
        inner = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
        window = config.get("max_position_embeddings", inner.get("max_position_embeddings"))
        return window if isinstance(window, int) and not isinstance(window, bool) and window > 1 else None
    tokens, known = context_length(getattr(args, "model", "") or "")
    return tokens if known else None


def build_kv(args: argparse.Namespace) -> KVConfig:
    try:
        return msgspec.convert({
            "model": msgspec.to_builtins(MODEL_SHAPES[args.model]),
            "gpu_memory_bytes": int(args.gpu_memory_gib * (1 << 30)),
            "gpu_memory_utilization": args.gpu_memory_utilization,
            "block_size": args.block_size,
            "num_gpu_blocks_override": args.num_gpu_blocks}, KVConfig)
    except msgspec.ValidationError as exc:
        raise ValidationError(str(exc), field="kv_config") from None


def _write_records(path: str, res: ScenarioResult) -> None:
    recs = res.records or []
    if path.endswith(".json"):
        Path(path).write_bytes(msgspec.json.encode(recs))
    else:
        Path(path).write_text(records_csv(recs))


def described(args: argparse.Namespace, scenario: Scenario) -> tuple[DescribedStepCost, KVConfig, Scenario]:
    """The step-time source and KV cache of --hf-config on --gpu
    (:func:`cascade.serving.description.describe_serving`, as the api wires it), and the
    scenario with vLLM's limits for that GPU where none were given."""
    from cascade.gpus import default_registry
    from cascade.serving.description import data_parallel, describe_serving
    from cascade.serving.requests import for_gpu, scheduler_limits

    if not args.gpu:
        raise ValidationError("--hf-config needs --gpu", field="--gpu")
    path = Path(args.hf_config)
    if not path.is_file():
        raise ValidationError(f"{path} does not exist", field="--hf-config")
    try:
        config = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValidationError(f"{path} is not JSON: {exc}", field="--hf-config") from None
    spec = default_registry().get(args.gpu)
    scenario = for_gpu(scenario, spec)
    tokens, seqs = scheduler_limits(scenario)
    served = describe_serving(
        config, spec, quant=args.quant, moe_quant=args.moe_quant,
        kv_dtype=args.kv_dtype, tp=args.tp, ep=args.ep, dp=args.dp, calibration=args.llm_calibration,
        max_num_batched_tokens=tokens, max_num_seqs=seqs,
        gpu_memory_utilization=args.gpu_memory_utilization, block_size=args.block_size,
        num_gpu_blocks_override=args.num_gpu_blocks, label=str(path),
        async_scheduling=args.scheduler != "vllm" or not args.no_async_scheduling, engine=args.scheduler)
    return served.cost, served.kv, data_parallel(scenario, args.dp)


def run(args: argparse.Namespace) -> int:
    if args.hf_config:
        if args.capacity or args.save_step_model:
            raise ValidationError("not available with --hf-config", field="--capacity" if args.capacity
                                  else "--save-step-model")
        source, kv, scenario = described(args, build_scenario(args))
        return _answer(args, run_scenario(scenario, source, kv))
    model = load_step_model(args)
    if args.save_step_model:
        Path(args.save_step_model).write_bytes(model.to_json())
    scenario = build_scenario(args)
    kv = build_kv(args)
    if args.capacity:
        search = min_replicas if args.capacity == "replicas" else max_rate

        def note(p: Any) -> None:
            print(f"  probe rate={p.rate:.3f} req/s replicas={p.replicas}: "
                  f"SLO attainment {100 * p.slo_attainment:.1f}% -> {'ok' if p.ok else 'miss'}",
                  file=sys.stderr)

        cap: CapacityResult = search(scenario, model, kv, progress=note)
        if args.json:
            print(msgspec.json.encode(cap).decode())
        elif not cap.found:
            print("No probed point met the SLOs.")
        else:
            what = (f"{cap.rate:.3f} req/s" if args.capacity == "rate"
                    else f"{cap.replicas} replicas")
            print(f"Capacity meeting the SLOs: {what}")
            if cap.result is not None:
                print(format_summary(cap.result))
        if args.records and cap.result is not None:
            _write_records(args.records, cap.result)
        return 0 if cap.found else 1
    return _answer(args, run_scenario(scenario, model, kv))


def _answer(args: argparse.Namespace, res: ScenarioResult) -> int:
    """Print a scenario's result (JSON or the vllm-bench-like summary) and its records."""
    if args.json:
        print(msgspec.json.encode(msgspec.structs.replace(res, records=None)).decode())
    else:
        print(format_summary(res))
    if args.records:
        _write_records(args.records, res)
    return 0
