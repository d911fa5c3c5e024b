"""Cascade settings: one frozen msgspec Struct loaded from ``CASCADE_*`` variables.

Every field of :class:`Settings` is read from the environment variable
``CASCADE_<FIELD>`` (upper case), optionally after a TOML file named by
``CASCADE_CONFIG`` (flat table of ``field = value``; environment wins).
Invalid values raise :class:`cascade.errors.ConfigError` naming the variable
and the expected form; the CLI and every service's ``__main__`` turn that into
exit code 2. Nothing is read at import time: call :func:`load_settings`.
"""

from __future__ import annotations

import functools
import os
import tomllib
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
import msgspec.inspect as mi

from cascade.errors import ConfigError

ENV_PREFIX = "CASCADE_"
CONFIG_FILE_VAR = "CASCADE_CONFIG"

Port = Annotated[int, msgspec.Meta(ge=0, le=65535)]
PositiveInt = Annotated[int, msgspec.Meta(ge=1)]
PositiveFloat = Annotated[float, msgspec.Meta(gt=0)]
NonNegativeFloat = Annotated[float, msgspec.Meta(ge=0)]

LogLevel = Literal["debug", "info", "warning", "error"]
LogFormat = Literal["auto", "json", "console"]
OrchestratorBackend = Literal["local", "kubernetes", "pool"]


def _doc(description: str, *, expected: str | None = None, **constraints: Any) -> msgspec.Meta:
    extra = {"expected": expected} if expected else None
    return msgspec.Meta(description=description, extra=extra, **constraints)


def _default_max_local_sims() -> int:
    return max(1, os.cpu_count() or 1)


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    """Every knob of Cascade. Field ``x`` is set by ``CASCADE_X``."""

    # --- bus -------------------------------------------------------------
    nats_url: Annotated[
        str,
        _doc(
            "NATS server URL(s), comma-separated for a cluster",
            pattern=r"^(nats|tls|ws|wss)://[^\s]+$",
            expected="a URL like nats://host:4222 (several separated by commas)",
        ),
    ] = "nats://127.0.0.1:4222"
    nats_connect_timeout_s: Annotated[
        float, _doc("Seconds to keep trying the first NATS connection before failing", gt=0)
    ] = 5.0
    stream_replicas: Annotated[
        int, _doc("Replicas of the JetStream streams and KV buckets (1 outside a cluster)", ge=1, le=5)
    ] = 1
    duplicate_window_s: Annotated[
        float, _doc("JetStream de-duplication window for Nats-Msg-Id, in seconds", gt=0)
    ] = 120.0
    events_max_age_s: Annotated[
        float, _doc("Maximum age of events kept in the CASCADE stream (0 keeps them forever)", ge=0)
    ] = 0.0

    # --- storage ---------------------------------------------------------
    s3_endpoint: Annotated[
        str, _doc(
            "S3 endpoint URL (any S3 server)",
            pattern=r"^https?://[^\s]+$",
            expected="a URL like http://host:8333",
        )
    ] = "http://127.0.0.1:8333"
    s3_public_endpoint: Annotated[
        str,
        _doc(
            "S3 URL that clients outside this network use in presigned URLs (empty: s3_endpoint)",
            pattern=r"^(https?://[^\s]+)?$",
            expected="empty or a URL like https://s3.example.com",
        ),
    ] = ""
    s3_access_key: Annotated[str, _doc("S3 access key id")] = ""
    s3_secret_key: Annotated[str, _doc("S3 secret access key (never logged)")] = ""
    s3_region: Annotated[str, _doc("S3 region name", min_length=1)] = "us-east-1"
    bucket: Annotated[
        str,
        _doc(
            "S3 bucket holding traces, bundles and results",
            pattern=r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$",
            expected="an S3 bucket name (3-63 lower-case letters, digits, dots, hyphens)",
        ),
    ] = "cascade"

    # --- http ------------------------------------------------------------
    http_host: Annotated[str, _doc("Address the api listens on", min_length=1)] = "127.0.0.1"
    http_port: Annotated[int, _doc("Port the api (and web UI) listens on", ge=1, le=65535)] = 8080
    metrics_port: Annotated[
        int, _doc("Port for a worker service's /metrics endpoint (0 disables it)", ge=0, le=65535)
    ] = 0
    api_tokens: Annotated[
        list[str],
        _doc("Bearer tokens accepted for write requests, comma-separated (empty: writes are open)"),
    ] = []
    max_upload_bytes: Annotated[
        int, _doc("Largest single file accepted through the api or a presigned upload", ge=1)
    ] = 64 * 1024**3
    multipart_threshold_bytes: Annotated[
        int, _doc("Files at least this large are uploaded in multipart parts", ge=5 * 1024**2)
    ] = 64 * 1024**2
    presign_ttl_s: Annotated[
        int, _doc("Lifetime of presigned upload/download URLs, in seconds", ge=1, le=7 * 24 * 3600)
    ] = 3600
    presign_put_ttl_s: Annotated[
        int, _doc("Lifetime of a single-PUT upload URL, in seconds (at most presign_ttl_s): "
                  "short, so a URL cannot replace its file long after it arrived", ge=1,
                  le=7 * 24 * 3600)
    ] = 900

    # --- hostile input ---------------------------------------------------
    trace_json_max_string_chars: Annotated[
        int, _doc("Longest JSON string in a Chrome-trace (PyTorch/Kineto) file, in characters",
                  ge=64)
    ] = 1 << 20
    trace_json_max_value_bytes: Annotated[
        int, _doc("Largest single value (one event) in a Chrome-trace file, in bytes", ge=1024)
    ] = 16 << 20
    trace_json_max_depth: Annotated[
        int, _doc("Deepest array/object nesting inside one Chrome-trace event", ge=2, le=900)
    ] = 64
    trace_json_max_events: Annotated[
        int, _doc("Most events in one Chrome-trace file", ge=1)
    ] = 50_000_000

    # --- local state -----------------------------------------------------
    data_dir: Annotated[
        str, _doc("Directory for the embedded stack's data (NATS store, S3 data, credentials)", min_length=1)
    ] = ".cascade"
    samples: Annotated[bool, _doc("Load the bundled sample runs at startup")] = True
    embedded_go_memory_mib: Annotated[
        int, _doc("Soft memory limit (Go GOMEMLIMIT, MiB) of the embedded nats-server and "
                  "SeaweedFS; 0 leaves Go's default (no limit). Below SeaweedFS's working heap "
                  "(about 200 MiB under uploads) its collector runs without pause", ge=0)
    ] = 384
    embedded_go_gc: Annotated[
        int, _doc("Go GOGC (heap growth, percent) of the embedded nats-server and SeaweedFS; "
                  "0 leaves Go's default (100)", ge=0, le=1000)
    ] = 50

    # --- logging ---------------------------------------------------------
    log_level: Annotated[LogLevel, _doc("Minimum log level")] = "info"
    log_format: Annotated[
        LogFormat, _doc("Log rendering: console on a TTY and JSON otherwise (auto), or forced")
    ] = "auto"

    # --- orchestration and jobs -----------------------------------------
    orchestrator_backend: Annotated[
        OrchestratorBackend,
        _doc("How simulations run: local processes, Kubernetes Jobs, or a pool of simulator workers"),
    ] = "local"
    max_local_sims: Annotated[
        int, _doc("Simulations run at once by the local backend (default: CPU count)", ge=1)
    ] = msgspec.field(default_factory=_default_max_local_sims)
    sim_timeout_s: Annotated[float, _doc("Deadline of one simulation, in seconds", gt=0)] = 3600.0
    job_ack_wait_s: Annotated[
        float, _doc("Seconds a job may go without a heartbeat before it is redelivered", gt=0)
    ] = 30.0
    job_max_deliver: Annotated[
        int, _doc("Deliveries of a job before it is reported failed", ge=1, le=100)
    ] = 3
    reconcile_interval_s: Annotated[
        float, _doc("Seconds between passes that reconcile S3 listings with known state", gt=0)
    ] = 30.0
    drain_timeout_s: Annotated[
        float, _doc("Seconds a stopping service waits for in-flight work before handing it back", ge=0)
    ] = 10.0

    # --- estimates and backends -----------------------------------------
    tokenizer: Annotated[
        str,
        _doc("Path of a tokenizer.json used to count text prompt tokens in /v1 (empty: approximate)"),
    ] = ""
    kubernetes_template: Annotated[
        str,
        _doc("TOML/JSON file with the Kubernetes Job template (empty: {data_dir}/kubernetes.toml)"),
    ] = ""
    accelsim_bin: Annotated[
        str,
        _doc("Path of a built accel-sim.out for the accel-sim model (empty: the model is off; "
             "build it from github.com/accel-sim/accel-sim-framework)"),
    ] = ""
    accelsim_configs: Annotated[
        str,
        _doc("An Accel-Sim checkout (its gpu-simulator/gpgpu-sim/configs/tested-cfgs and "
             "gpu-simulator/configs/tested-cfgs, merged per config name) or a folder of config "
             "folders named after Accel-Sim configs (SM7_QV100/) or Cascade GPU ids (SM90_H100/), "
             "each with gpgpusim.config, trace.config and the files they include (empty: none)"),
    ] = ""
    accelsim_ld_library_path: Annotated[
        str,
        _doc("Folders (':'-separated) put first on LD_LIBRARY_PATH when accel-sim.out runs: where "
             "GPGPU-Sim's libcudart.so is, as gpu-simulator/setup_environment.sh sets it "
             "(gpgpu-sim/lib/gcc-*/cuda-*/release). Empty: found in the checkout of "
             "CASCADE_ACCELSIM_CONFIGS or of CASCADE_ACCELSIM_BIN"),
    ] = ""
    accelsim_config_map: Annotated[
        list[Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*=[A-Za-z0-9_.-]*$")]],
        _doc("Pairings of Cascade GPU ids with Accel-Sim config names that replace or add to the "
             "built-in table (cascade.gpus.accelsim_names), e.g. SM80_A100=SM86_RTX3070; "
             "GPU_ID= says that GPU has none",
             expected="a comma-separated list of GPU_ID=ACCELSIM_CONFIG (e.g. SM80_A100=SM86_RTX3070)"),
    ] = []

    # --- identity --------------------------------------------------------
    service_name: Annotated[
        str, _doc("Name this process reports (empty: the service's own name)")
    ] = ""

    @property
    def data_path(self) -> Path:
        """``data_dir`` as a :class:`~pathlib.Path`."""
        return Path(self.data_dir)

    def replace(self, **changes: Any) -> Settings:
        """A copy with some fields changed (validated like the environment)."""
        raw = {name: getattr(self, name) for name in self.__struct_fields__}
        raw.update(changes)
        return _build({k: (v, f"Settings.{k}") for k, v in raw.items()})

    def redacted(self) -> dict[str, Any]:
        """All settings as a dict with secrets masked, for logs and status pages."""
        out = msgspec.structs.asdict(self)
        for secret in ("s3_secret_key",):
            if out[secret]:
                out[secret] = "***"
        out["api_tokens"] = ["***"] * len(self.api_tokens)
        return out


def env_var(field: str) -> str:
    """The environment variable that sets ``field``."""
    return ENV_PREFIX + field.upper()


def _fields() -> list[mi.Field]:
    info = mi.type_info(Settings)
    assert isinstance(info, mi.StructType)
    return list(info.fields)


def _unwrap(t: mi.Type) -> tuple[mi.Type, dict[str, Any]]:
    extra: dict[str, Any] = {}
    while isinstance(t, mi.Metadata):
        extra.update(t.extra_json_schema or {})
        extra.update(t.extra or {})
        t = t.type
    return t, extra


def _bounds(t: Any, unit: str) -> str:
    parts = []
    for attr, sym in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
        v = getattr(t, attr, None)
        if v is not None:
            parts.append(f"{sym} {v}")
    return f"{unit} {' and '.join(parts)}" if parts else unit


def expected_form(field: str) -> str:
    """Human description of the values ``field`` accepts (used in error messages)."""
    for f in _fields():
        if f.name == field:
            t, extra = _unwrap(f.type)
            break
    else:
        raise KeyError(field)
    if "expected" in extra:
        return str(extra["expected"])
    if isinstance(t, mi.BoolType):
        return "a boolean (true/false, 1/0, yes/no, on/off)"
    if isinstance(t, mi.IntType):
        return _bounds(t, "an integer")
    if isinstance(t, mi.FloatType):
        return _bounds(t, "a number")
    if isinstance(t, mi.LiteralType):
        return "one of " + ", ".join(str(v) for v in t.values)
    if isinstance(t, mi.ListType):
        return "a comma-separated list of strings"
    if isinstance(t, mi.StrType):
        if t.pattern is not None:
            return f"a string matching {t.pattern}"
        if t.min_length:
            return "a non-empty string"
        return "a string"
    return str(t)


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _coerce_text(field: str, text: str) -> Any:
    """Turn an environment string into the raw value for ``field``'s type."""
    t = next(_unwrap(f.type)[0] for f in _fields() if f.name == field)
    stripped = text.strip()
    if isinstance(t, mi.BoolType):
        low = stripped.lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        return text  # rejected by convert below
    if isinstance(t, mi.ListType):
        return [item.strip() for item in stripped.split(",") if item.strip()]
    if isinstance(t, (mi.IntType, mi.FloatType)):
        return stripped
    if isinstance(t, mi.LiteralType):
        return stripped.lower()
    return stripped


@functools.cache
def _hints() -> dict[str, Any]:
    return typing.get_type_hints(Settings, include_extras=True)


def _build(values: Mapping[str, tuple[Any, str]]) -> Settings:
    """Validate ``{field: (value, source name)}`` field by field, then build Settings."""
    fields = {f.name: f for f in _fields()}
    checked: dict[str, Any] = {}
    for name, (value, source) in values.items():
        field = fields.get(name)
        if field is None:
            raise ConfigError(source, value, "a known setting: " + ", ".join(sorted(fields)))
        if isinstance(_unwrap(field.type)[0], mi.BoolType) and not isinstance(value, bool):
            raise ConfigError(source, value, expected_form(name))
        try:
            checked[name] = msgspec.convert(value, _hints()[name], strict=False)
        except msgspec.ValidationError:
            raise ConfigError(source, value, expected_form(name)) from None
    return Settings(**checked)


def load_settings(
    environ: Mapping[str, str] | None = None,
    **overrides: Any,
) -> Settings:
    """Settings from ``environ`` (default ``os.environ``), the optional TOML file, and overrides.

    Precedence: keyword overrides > ``CASCADE_*`` variables > TOML file > defaults.
    Raises :class:`ConfigError` naming the variable (or ``file:key``) and the expected form.
    """
    env = os.environ if environ is None else environ
    values: dict[str, tuple[Any, str]] = {}
    config_file = env.get(CONFIG_FILE_VAR, "").strip()
    if config_file:
        values.update(_read_toml(Path(config_file)))
    names = {f.name for f in _fields()}
    for name in names:
        var = env_var(name)
        if var in env:
            values[name] = (_coerce_text(name, env[var]), var)
    for name, value in overrides.items():
        values[name] = (value, name)
    return _build(values)


def _read_toml(path: Path) -> dict[str, tuple[Any, str]]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(CONFIG_FILE_VAR, str(path), "the path of an existing TOML file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(CONFIG_FILE_VAR, str(path), f"a readable TOML file ({exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(CONFIG_FILE_VAR, str(path), f"valid TOML ({exc})") from None
    table = data.get("cascade", data) if isinstance(data.get("cascade"), dict) else data
    return {key: (value, f"{path}:{key}") for key, value in table.items()}


def settings_doc() -> list[tuple[str, str, str]]:
    """``(environment variable, default, description)`` for every setting, in field order."""
    rows = []
    for f in _fields():
        _, extra = _unwrap(f.type)
        if f.name == "max_local_sims":
            default = "number of CPUs"
        else:
            value = f.default if f.default_factory is msgspec.NODEFAULT else f.default_factory()
            if isinstance(value, list):
                default = ",".join(value)
            elif isinstance(value, bool):
                default = "true" if value else "false"
            else:
                default = str(value)
        description = f"{extra.get('description', '')} ({expected_form(f.name)})"
        rows.append((env_var(f.name), default, description))
    return rows
