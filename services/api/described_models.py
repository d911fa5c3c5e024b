"""Described models as ``/v1`` models: a bundled config.json on a GPU, no trace.

An id is ``described/<config>/<GPU>[/tp<N>][/ep<N>][/<quant>]`` (:data:`GRAMMAR`): a bundled
config's name (``GET /api/model-configs``), a GPU spec id, alias or custom spec (resolved as
every route resolves one: :func:`cascade.runs.plan.resolve_config` over the api's custom
specs), then in any order the tensor-parallel GPUs (default 1), the expert-parallel ranks
among them (default 1) and one quantisation of :data:`QUANTS` for every linear layer (default:
what the checkpoint's own ``quantization_config`` says, bf16 where it says nothing:
:func:`cascade.serving.description.checkpoint_quant`). Ids are echoed canonical: the GPU by its
spec id, defaults left out.

:meth:`DescribedModels.resolve` checks an id cheaply (the description's weights and KV cache,
nothing timed): a malformed id, an unknown config or GPU is a 404 ``model_not_found`` saying
the grammar and what was wrong; a model that cannot be served as named (no room for the KV
cache at that TP, heads or experts that do not split) a 400. :meth:`DescribedModels.step_model`
builds its :class:`~cascade.serving.description.DescribedServing` (the step-time source, about
0.2 s) in a worker thread once per id and GPU spec, kept in a bounded LRU; concurrent requests
share one build. :meth:`DescribedModels.listing` is one entry per bundled config for
``GET /v1/models``: on :data:`LISTED_GPU` (else the first of :data:`LISTED_FALLBACK_GPUS` it fits) at
the smallest TP of :data:`LISTED_TPS` whose KV cache holds the config's whole context window, at the
checkpoint's precision.
"""

from __future__ import annotations

import asyncio
import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import msgspec
from aiohttp import web

from cascade.errors import UnknownGPUError, ValidationError
from cascade.gpus import GPUSpec, default_registry
from cascade.platform.log import get_logger
from cascade.runs.described import DescribedStepModel
from cascade.runs.plan import resolve_config
from cascade.serving.contexts import DEFAULT_CONTEXT_TOKENS
from cascade.serving.description import (
    EXAMPLE_CONFIGS,
    DescribedFootprint,
    checkpoint_quant,
    describe_serving,
    described_footprint,
    example_config,
)
from cascade.singleflight import SingleFlight
from services.api.openai import OpenAIError

log = get_logger("cascade.api.described")

PREFIX = "described"
GRAMMAR = "described/<config>/<GPU>[/tp<N>][/ep<N>][/<quant>]"
#: Quantisations an id may name (every linear layer, experts included).
QUANTS: tuple[str, ...] = ("bf16", "fp8", "fp8-block", "fp4", "int4")
#: The GPU and the TPs ``GET /v1/models`` lists each bundled config at (the smallest that fits).
LISTED_GPU = "SM90_H100"
#: Where a bundled config fits no listed TP of :data:`LISTED_GPU`, the next GPUs tried, in order
#: (DeepSeek-V3's FP8 weights leave no KV cache on eight 80 GB H100s).
LISTED_FALLBACK_GPUS: tuple[str, ...] = ("SM90_H200", "SM100_B200")
LISTED_TPS: tuple[int, ...] = (1, 2, 4, 8)
#: Most parallel GPUs an id may name.
MAX_PARALLEL = 64
#: Built step-time sources kept (least recently used dropped first).
MAX_BUILT = 16
#: Resolved ids kept (their footprints: cheap, but asked for on every request).
MAX_RESOLVED = 256
#: Shape of the step whose kernel rows the basis' expected error is weighted over: a 1,024-token
#: prefill, and a request alone (batch 1), as /v1 estimates one.
TYPICAL_PROMPT = 1024
TYPICAL_BATCH = 1

_PARALLEL = re.compile(r"(tp|ep)(\d+)")


def is_described(model: str) -> bool:
    """Whether ``model`` claims to be a described model's id."""
    return model.startswith(f"{PREFIX}/")


@dataclass(frozen=True, slots=True)
class DescribedRef:
    """What a described id names (the GPU as written)."""

    config: str
    gpu: str
    tp: int = 1
    ep: int = 1
    quant: str | None = None
    """None: the checkpoint's own precision."""


def _not_found(model: str, what: str, **extra: Any) -> OpenAIError:
    return OpenAIError(404, f"model {model[:200]!r}: {what}; a described model's id is {GRAMMAR} "
                            f"(configs: {', '.join(EXAMPLE_CONFIGS)}; quantisations: {', '.join(QUANTS)})",
                       param="model", code="model_not_found", **extra)


def parse_described_id(model: str) -> DescribedRef:
    """The parts of a described id; a 404 :class:`OpenAIError` saying what is wrong otherwise."""
    parts = model.split("/")
    if len(parts) < 3 or parts[0] != PREFIX or not parts[1] or not parts[2]:
        raise _not_found(model, "expected a config and a GPU after described/")
    seen: dict[str, str] = {}
    values: dict[str, int] = {}
    quant: str | None = None
    for seg in parts[3:]:
        low = seg.lower()
        m = _PARALLEL.fullmatch(low)
        kind = m.group(1) if m else "quant" if low in QUANTS else ""
        if not kind:
            raise _not_found(model, f"segment {seg[:40]!r} is none of tp<N>, ep<N> or a quantisation")
        if kind in seen:
            raise _not_found(model, f"segment {seg[:40]!r} repeats {seen[kind]!r}")
        seen[kind] = seg
        if m:
            n = int(m.group(2))
            if not 1 <= n <= MAX_PARALLEL:
                raise _not_found(model, f"{kind} must be 1 to {MAX_PARALLEL}, got {n}")
            values[kind] = n
        else:
            quant = low
    if parts[1] not in EXAMPLE_CONFIGS:
        raise _not_found(model, f"no bundled config {parts[1][:80]!r}")
    return DescribedRef(config=parts[1], gpu=parts[2], tp=values.get("tp", 1), ep=values.get("ep", 1),
                        quant=quant)


def described_id(config: str, gpu: str, tp: int = 1, ep: int = 1, quant: str | None = None) -> str:
    """The canonical id (defaults left out)."""
    tail = [f"tp{tp}"] * (tp != 1) + [f"ep{ep}"] * (ep != 1) + ([quant] if quant else [])
    return "/".join([PREFIX, config, gpu, *tail])


@dataclass(frozen=True, slots=True)
class DescribedEntry:
    """A described model id resolved: its GPU spec, precision and footprint."""

    id: str
    """Canonical id."""
    ref: DescribedRef
    """The id's parts, the GPU by its spec id."""
    spec: GPUSpec
    quant: str
    """Linear layers' dtype."""
    moe_quant: str | None
    """Experts' dtype (None: as ``quant``)."""
    footprint: DescribedFootprint

    @property
    def context_length(self) -> int:
        """Most tokens one request may hold: the config's context window, or fewer where the KV
        cache holds fewer (as a vLLM started with ``--max-model-len`` at its capacity)."""
        window = self.footprint.context_tokens or DEFAULT_CONTEXT_TOKENS
        return max(1, min(window, self.footprint.kv_cache_tokens))

    @property
    def weights_gib_per_gpu(self) -> float:
        return round(self.footprint.weight_bytes_per_gpu / (1 << 30), 2)


def _footprint(config: str, spec: GPUSpec, quant: str, moe_quant: str | None, tp: int,
               ep: int) -> DescribedFootprint:
    return described_footprint(example_config(config), spec, quant=quant, moe_quant=moe_quant, tp=tp, ep=ep)


class DescribedModels:
    """Described models of one api: resolved ids, built step-time sources (bounded), the listing.

    ``custom_specs`` / ``fresh_specs``: the api's custom GPU specs as known now / once every
    spec stored before the call is in."""

    def __init__(self, custom_specs: Callable[[], dict[str, GPUSpec]] | None = None,
                 fresh_specs: Callable[[], Awaitable[dict[str, GPUSpec]]] | None = None, *,
                 max_built: int = MAX_BUILT) -> None:
        self.custom_specs: Callable[[], dict[str, GPUSpec]] = custom_specs or dict
        self.fresh_specs = fresh_specs
        self.max_built = max_built
        self._built: OrderedDict[tuple[str, bytes], DescribedStepModel] = OrderedDict()
        self._building: SingleFlight[tuple[str, bytes], DescribedStepModel] = SingleFlight()
        self._resolved: OrderedDict[tuple[str, bytes], DescribedEntry] = OrderedDict()
        self._listing: list[DescribedEntry] | None = None
        self.builds = 0
        """Step-time sources built (for tests and stats)."""

    # -- ids -------------------------------------------------------------------------------
    async def resolve(self, model: str) -> DescribedEntry:
        """The entry of a described id (404 / 400 :class:`OpenAIError` otherwise; see the module)."""
        ref = parse_described_id(model)
        try:
            try:
                spec = self._spec(ref.gpu, self.custom_specs())
            except UnknownGPUError:
                if self.fresh_specs is None:
                    raise
                spec = self._spec(ref.gpu, await self.fresh_specs())  # stored a moment ago elsewhere?
        except UnknownGPUError as exc:
            close = f"; closest: {', '.join(exc.suggestions)}" if exc.suggestions else ""
            raise _not_found(model, f"unknown GPU {ref.gpu[:80]!r}{close} (GET /api/configs lists them)",
                             suggestions=exc.suggestions) from None
        key = (model, spec_key(spec))
        hit = self._resolved.get(key)
        if hit is not None:
            self._resolved.move_to_end(key)
            return hit
        entry = self._entry(ref, spec)
        self._resolved[key] = entry
        while len(self._resolved) > MAX_RESOLVED:
            self._resolved.popitem(last=False)
        return entry

    @staticmethod
    def _spec(gpu: str, custom: dict[str, GPUSpec]) -> GPUSpec:
        return resolve_config(gpu, custom=custom, where="model").spec

    @staticmethod
    def _entry(ref: DescribedRef, spec: GPUSpec) -> DescribedEntry:
        quant, moe_quant = (ref.quant, None) if ref.quant else checkpoint_quant(example_config(ref.config))
        canonical = described_id(ref.config, spec.id, ref.tp, ref.ep, ref.quant)
        try:
            fp = _footprint(ref.config, spec, quant, moe_quant, ref.tp, ref.ep)
        except ValidationError as exc:
            raise OpenAIError(400, f"model {canonical!r} cannot be served: {exc}", param="model",
                              code="invalid_value") from None
        if fp.kv_cache_tokens < 1:
            raise OpenAIError(400, _no_room(ref, spec, quant, moe_quant, fp), param="model",
                              code="model_does_not_fit")
        return DescribedEntry(id=canonical, ref=DescribedRef(config=ref.config, gpu=spec.id, tp=ref.tp, ep=ref.ep,
                                                             quant=ref.quant),
                              spec=spec, quant=quant, moe_quant=moe_quant, footprint=fp)

    # -- step-time sources -----------------------------------------------------------------
    async def step_model(self, entry: DescribedEntry) -> DescribedStepModel:
        """The entry's step-time source, built once (in a worker thread) per id and GPU spec."""
        key = (entry.id, spec_key(entry.spec))
        hit = self._built.get(key)
        if hit is not None:
            self._built.move_to_end(key)
            return hit

        async def fresh() -> DescribedStepModel:
            ref = entry.ref
            try:
                served = await asyncio.to_thread(
                    describe_serving, example_config(ref.config), entry.spec, quant=entry.quant,
                    moe_quant=entry.moe_quant, tp=ref.tp, ep=ref.ep, label=ref.config,
                    typical_prompt=TYPICAL_PROMPT, typical_batch=TYPICAL_BATCH)
            except ValidationError as exc:
                raise OpenAIError(400, f"model {entry.id!r} cannot be served: {exc}", param="model",
                                  code="invalid_value") from None
            built = DescribedStepModel(served=served)
            self._built[key] = built
            while len(self._built) > self.max_built:
                self._built.popitem(last=False)
            self.builds += 1
            return built

        return await self._building.run(key, fresh)

    # -- GET /v1/models --------------------------------------------------------------------
    def listing(self) -> list[DescribedEntry]:
        """One entry per bundled config (see the module); a config that fits at none of
        :data:`LISTED_TPS` is left out. Computed once (the bundled configs do not change)."""
        if self._listing is None:
            reg = default_registry()
            out = []
            for name in EXAMPLE_CONFIGS:
                quant, moe_quant = checkpoint_quant(example_config(name))
                for gpu in (LISTED_GPU, *LISTED_FALLBACK_GPUS):
                    spec = reg.get(gpu)
                    tp = smallest_fitting_tp(name, spec, quant, moe_quant)
                    if tp is not None:
                        break
                if tp is None:
                    log.info("bundled config fits no listed TP", config=name, gpu=spec.id)
                    continue
                fp = _footprint(name, spec, quant, moe_quant, tp, 1)
                out.append(DescribedEntry(id=described_id(name, spec.id, tp), ref=DescribedRef(
                    config=name, gpu=spec.id, tp=tp), spec=spec, quant=quant, moe_quant=moe_quant, footprint=fp))
            self._listing = out
        return self._listing


def smallest_fitting_tp(config: str, spec: GPUSpec, quant: str, moe_quant: str | None, ep: int = 1,
                        tps: tuple[int, ...] = LISTED_TPS) -> int | None:
    """The smallest of ``tps`` at which ``config`` fits ``spec`` (its KV cache holds the whole
    context window), or None."""
    for tp in tps:
        try:
            if _footprint(config, spec, quant, moe_quant, tp, ep).fits:
                return tp
        except ValidationError:
            continue  # heads or experts do not split over this TP
    return None


def _no_room(ref: DescribedRef, spec: GPUSpec, quant: str, moe_quant: str | None,
             fp: DescribedFootprint) -> str:
    weights = fp.weight_bytes_per_gpu / (1 << 30)
    dtype = quant if moe_quant is None else f"{quant}, experts {moe_quant}"
    larger = tuple(tp for tp in LISTED_TPS if tp > ref.tp)
    fits = smallest_fitting_tp(ref.config, spec, quant, moe_quant, ref.ep, larger) if larger else None
    hint = f"; tp{fits} fits" if fits else ""
    return (f"{ref.config} ({dtype}) does not fit {spec.id} ({spec.memory_gb:g} GB) at tp{ref.tp}: "
            f"{weights:.1f} GiB of weights per GPU leave no room for the KV cache (90% of the memory, "
            f"less the activation reserve){hint}")


def spec_key(spec: GPUSpec) -> bytes:
    """What tells two versions of a (custom) spec apart."""
    return msgspec.json.encode(spec)


DESCRIBED_MODELS = web.AppKey("described_models", DescribedModels)


def described_models(app: web.Application) -> DescribedModels:
    """The app's described models (see :func:`install`)."""
    return app[DESCRIBED_MODELS]


def install(app: web.Application) -> DescribedModels:
    """Create the app's described models once (idempotent; from a route module's sync ``setup``),
    resolving GPUs over the api's custom-spec index."""
    from services.api.spec_index import install as install_specs

    if DESCRIBED_MODELS not in app:
        specs = install_specs(app)
        app[DESCRIBED_MODELS] = DescribedModels(specs.specs, specs.fresh)
    return app[DESCRIBED_MODELS]


__all__ = ["GRAMMAR", "PREFIX", "QUANTS", "DescribedEntry", "DescribedModels", "DescribedRef",
           "described_id", "described_models", "install", "is_described", "parse_described_id", "smallest_fitting_tp"]
