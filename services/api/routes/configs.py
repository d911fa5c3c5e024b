"""GPU configurations: list the built-in and custom specs, add a custom spec.

Custom specs are validated like spec files and stored in KV
(``cascade-meta``, key ``gpus.{id}``) so every api replica and simulator agrees.
"""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import msgspec
from aiohttp import web

from cascade.engine.registry import model_names
from cascade.errors import NotFoundError, ValidationError
from cascade.gpus import ARCHES, GPUSpec, default_registry, normalize_name, spec_from_mapping
from cascade.gpus.spec import plausibility_error
from cascade.platform.accelsim import MODEL as ACCELSIM
from cascade.platform.accelsim import AccelSimSetup, discover_with
from cascade.platform.specstore import save_custom_spec
from services.api.appkeys import BUS, SETTINGS
from services.api.http import doc, integral_floats, json_response
from services.api.spec_index import install as install_specs
from services.api.spec_index import spec_index

routes = web.RouteTableDef()


class AccelSimConfigRef(msgspec.Struct, frozen=True, kw_only=True):
    """Which Accel-Sim config serves a GPU here, or why none does."""

    name: str | None = None
    """Accel-Sim config name (e.g. ``SM6_TITANX``); None when no config serves this GPU."""
    relation: str = ""
    """``same chip``, ``closest`` (the table), ``folder`` (a folder named after the GPU) or
    ``setting`` (CASCADE_ACCELSIM_CONFIG_MAP); empty when none."""
    reason: str = ""
    """Why that config serves this GPU, or why there is none (naming the setting to change)."""


class ConfigSummary(msgspec.Struct, frozen=True, kw_only=True):
    """One GPU configuration as the api lists it."""

    id: str
    name: str
    arch: str
    sm_version: int
    sms: int
    boost_clock_mhz: float
    memory_gb: float
    memory_type: str
    memory_bandwidth_gbps: float
    l2_mb: float
    fp32_tflops: float
    fp16_tflops: float
    tensor_tflops: dict[str, float]
    aliases: list[str]
    custom: bool
    """True for specs added through POST /api/configs."""
    spec_hash: str
    models: list[str] = []
    """Kernel models a run on this config can use (``accel-sim`` only where it is configured)."""
    accelsim: bool = False
    """True when this config can run the ``accel-sim`` model (CASCADE_ACCELSIM_BIN is usable and
    CASCADE_ACCELSIM_CONFIGS has a config that serves it)."""
    accelsim_config: AccelSimConfigRef | None = None
    """The Accel-Sim config that serves this GPU, or why none does (None: not looked up)."""


class AccelSimAvailability(msgspec.Struct, frozen=True, kw_only=True):
    """Whether the ``accel-sim`` model is configured here, and for which configs."""

    available: bool
    """True when at least one config can run accel-sim."""
    configs: list[str]
    """Config ids that can run accel-sim."""
    problems: list[str] = []
    """What keeps the model (or a config folder) from running, naming the setting."""
    config_names: list[str] = []
    """Usable Accel-Sim config folders found in CASCADE_ACCELSIM_CONFIGS (e.g. SM6_TITANX)."""
    layout: str = ""
    """``checkout`` (an Accel-Sim checkout's tested-cfgs, merged per name), ``folders`` (a folder
    of config folders) or empty (CASCADE_ACCELSIM_CONFIGS unusable)."""
    unrunnable: dict[str, str] = {}
    """Config folders found that serve no GPU here (PTX-only, no GPU of their architecture, an
    unknown name) -> why, each once."""
    library_path: str = ""
    """Folders put first on LD_LIBRARY_PATH when accel-sim.out runs (CASCADE_ACCELSIM_LD_LIBRARY_PATH
    or found in the checkout)."""


class ConfigList(msgspec.Struct, frozen=True, kw_only=True):
    """Answer of GET /api/configs."""

    configs: list[ConfigSummary]
    accelsim: AccelSimAvailability | None = None
    """The accel-sim model's setup (CASCADE_ACCELSIM_BIN, CASCADE_ACCELSIM_CONFIGS)."""


BUILTIN_MODELS = [m for m in model_names() if m != ACCELSIM]


def models_for(config_id: str, setup: AccelSimSetup | None) -> list[str]:
    """Kernel models a run on ``config_id`` can use."""
    if setup is not None and setup.can_run(config_id):
        return [*BUILTIN_MODELS, ACCELSIM]
    return list(BUILTIN_MODELS)


async def accelsim_setup(request: web.Request) -> AccelSimSetup:
    """The accel-sim setup of this api's settings over the built-in and custom specs (file checks
    and the binary's start-up probe in a thread): the same setup ``POST /api/runs`` checks."""
    custom = list(spec_index(request.app).specs().values())
    return await asyncio.to_thread(discover_with, request.app[SETTINGS], custom)


def availability(setup: AccelSimSetup) -> AccelSimAvailability:
    """The listing's view of the accel-sim setup."""
    return AccelSimAvailability(available=bool(setup.runnable()), configs=setup.runnable(),
                                problems=list(setup.problems), config_names=list(setup.available),
                                layout=setup.layout, unrunnable=dict(setup.unrunnable),
                                library_path=setup.library_path)


def config_ref(spec_id: str, setup: AccelSimSetup | None) -> AccelSimConfigRef | None:
    """The Accel-Sim config that serves ``spec_id`` (see :meth:`AccelSimSetup.serving`)."""
    if setup is None:
        return None
    s = setup.serving(spec_id)
    return AccelSimConfigRef(name=s.config, relation=s.relation, reason=s.reason)


def summary(spec: GPUSpec, *, custom: bool, setup: AccelSimSetup | None = None) -> ConfigSummary:
    """The listing entry of one spec."""
    return ConfigSummary(
        id=spec.id, name=spec.name, arch=spec.arch, sm_version=spec.sm_version, sms=spec.sms,
        boost_clock_mhz=spec.boost_clock_mhz, memory_gb=spec.memory_gb,
        memory_type=spec.memory_type, memory_bandwidth_gbps=spec.memory_bandwidth_gbps,
        l2_mb=spec.l2_mb, fp32_tflops=spec.fp32_tflops, fp16_tflops=spec.fp16_tflops,
        tensor_tflops=dict(spec.tensor_tflops), aliases=list(spec.aliases), custom=custom,
        spec_hash=spec.spec_hash(), models=models_for(spec.id, setup),
        accelsim=setup is not None and setup.can_run(spec.id),
        accelsim_config=config_ref(spec.id, setup),
    )


async def all_configs(request: web.Request, setup: AccelSimSetup | None = None) -> list[ConfigSummary]:
    """Built-in specs (registry order) followed by custom specs (by id)."""
    out = [summary(s, custom=False, setup=setup) for s in default_registry()]
    custom = spec_index(request.app).specs()
    out.extend(summary(custom[k], custom=True, setup=setup) for k in sorted(custom))
    return out


#: Seconds a built listing is answered again (a custom spec stored through another api
#: instance shows within this; one stored through this instance at once).
LISTING_TTL_S = 1.0
#: Up to this age an older listing answers while a new one is built (the first request
#: after a custom spec is stored here waits for the new one).
LISTING_STALE_S = 10.0
LISTING: web.AppKey[dict[str, Any]] = web.AppKey("config_listing", dict)


async def _listing(request: web.Request) -> bytes:
    setup = await accelsim_setup(request)
    listing = ConfigList(configs=await all_configs(request, setup), accelsim=availability(setup))
    return await asyncio.to_thread(msgspec.json.encode, listing)


@routes.get("/api/configs")
@doc(response=ConfigList, tags=("configs",))
async def list_configs(request: web.Request) -> web.Response:
    """Every GPU configuration a run can use: id, name, SMs, memory, bandwidth, tensor peaks,
    and the kernel models each can run (``accel-sim`` where configured).

    Built at most once per :data:`LISTING_TTL_S` per api instance, in the background while
    the previous one answers (concurrent requests share one build: file checks, a KV scan and
    a spec hash per GPU are not redone per request)."""
    cache = request.app[LISTING]
    now = time.monotonic()
    body: bytes | None = cache.get("body")
    if body is not None and now - cache["at"] < LISTING_TTL_S:
        return web.Response(body=body, content_type="application/json")
    task: asyncio.Task[bytes] | None = cache.get("task")
    if task is None:
        generation = cache.get("generation", 0)
        task = cache["task"] = asyncio.ensure_future(_listing(request))

        def built(t: asyncio.Task[bytes]) -> None:
            if cache.get("task") is t:
                del cache["task"]
            if not t.cancelled() and t.exception() is None and cache.get("generation", 0) == generation:
                cache.update(body=t.result(), at=time.monotonic())

        task.add_done_callback(built)
    if body is not None and now - cache["at"] < LISTING_STALE_S:
        # an older listing answers at once while the new one is built
        return web.Response(body=body, content_type="application/json")
    return web.Response(body=await asyncio.shield(task), content_type="application/json")


def setup(app: web.Application) -> None:
    """The per-instance listing cache and the custom-spec index it reads."""
    app[LISTING] = {}
    install_specs(app)


class ConfigDetail(msgspec.Struct, frozen=True, kw_only=True):
    """Answer of GET /api/configs/{id}: the summary and the full spec."""

    config: ConfigSummary
    spec: GPUSpec


class ConfigStored(msgspec.Struct, frozen=True, kw_only=True):
    """Answer of POST /api/configs."""

    config: ConfigSummary


@routes.get("/api/configs/{config_id}")
@doc(response=ConfigDetail, tags=("configs",), responses={404: "unknown configuration"})
async def get_config(request: web.Request) -> web.Response:
    """One GPU configuration (by id or alias) with its full spec."""
    name = request.match_info["config_id"]
    spec = default_registry().resolve(name)
    custom = False
    if spec is None:
        specs = await spec_index(request.app).fresh()
        wanted = normalize_name(name)
        spec = next((s for s in specs.values()
                     if wanted in (normalize_name(s.id), *map(normalize_name, s.aliases))), None)
        custom = spec is not None
    if spec is None:
        known = [*default_registry().ids(), *spec_index(request.app).specs()]
        raise NotFoundError(f"unknown GPU config {name!r}; known: {', '.join(known)}")
    setup = await accelsim_setup(request)
    return json_response(ConfigDetail(config=summary(spec, custom=custom, setup=setup), spec=spec))


_FIELD_PATH = re.compile(r"\s*-?\s*at `\$\.([A-Za-z0-9_]+)[^`]*`")
_MISSING = re.compile(r"missing required field `([A-Za-z0-9_]+)`")


def _checked_fields(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` if it converts to a :class:`GPUSpec`; else a :class:`ValidationError` naming the
    field (``field``) so a form can show the message beside it."""
    body = {k: v for k, v in data.items() if k != "notes"}
    try:
        spec = msgspec.convert(body, GPUSpec, strict=False)
    except msgspec.ValidationError as exc:
        text = str(exc)
        bounded = plausibility_error(text, body)
        if bounded is not None:  # the documented physical range (gpus.spec), beside the field
            path, expected, value = bounded
            raise ValidationError(f"expected {expected}, got {value!r}",
                                  field=path.split("[", 1)[0].split(".", 1)[0]) from None
        found = _FIELD_PATH.search(text) or _MISSING.search(text)
        message = _FIELD_PATH.sub("", text).strip() if found else text
        raise ValidationError(message or text, field=found.group(1) if found else "body") from None
    if spec.arch not in ARCHES:
        raise ValidationError(f"expected one of {', '.join(ARCHES)}", field="arch")
    if not spec.id.strip() or not _ID.fullmatch(spec.id):
        raise ValidationError("letters, digits, '_' or '-', at most 64", field="id")
    if not spec.name.strip():
        raise ValidationError("must not be empty", field="name")
    return data


_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


@routes.post("/api/configs")
@doc(request=GPUSpec, response=ConfigStored, status=201, tags=("configs",),
     responses={201: "stored", 400: "invalid spec", 409: "id taken by a built-in spec"})
async def add_config(request: web.Request) -> web.Response:
    """Add (or replace) a custom GPU spec; validated like a spec file, stored in KV."""
    body = await request.read()
    try:
        data: Any = msgspec.json.decode(body) if body else None
    except msgspec.DecodeError as exc:
        raise ValidationError(f"malformed JSON: {exc}", field="body") from None
    if not isinstance(data, dict):
        raise ValidationError("expected a JSON object with the GPU spec fields", field="body")
    spec = spec_from_mapping(_checked_fields(integral_floats(data)), "request body", strict=True)
    await save_custom_spec(request.app[BUS], spec)
    await spec_index(request.app).fresh()
    cache = request.app[LISTING]  # this instance lists it at once
    cache["generation"] = cache.get("generation", 0) + 1
    cache.pop("body", None)
    cache.pop("task", None)
    return json_response(ConfigStored(config=summary(spec, custom=True)), status=201)
