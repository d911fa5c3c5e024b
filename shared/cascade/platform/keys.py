"""Every S3 key and KV key Cascade uses, in one place.

S3 (one bucket):

- ``traces/{trace}/raw/{file}``: uploaded raw files; ``traces/{trace}/parts/{unit}/{etag}.msgpack``:
  each unit's prepared part.
- ``bundles/{trace}/{hash}/``: content-addressed bundles (file names: :mod:`cascade.traces.bundle`).
- ``results/{run}/{sim}/``: a sim's ``result.json``, ``kernels.npz`` and cached ``stepmodel.json``.
- ``health/ready``: a tiny object the readiness check reads back, so "ready" means objects can be
  read (an S3 gateway can answer for the bucket before its storage serves data).

KV (buckets named in :mod:`cascade.platform.subjects`): a trace's record, expected set, files
and units under ``{trace}[.files|.units|.expected]``; custom GPU specs under ``gpus.{id}``.
"""

from __future__ import annotations

import re
from urllib.parse import unquote_plus

from cascade.errors import ValidationError
from cascade.ids import check_token
from cascade.platform import subjects
from cascade.traces.files import check_name

_SLUG = re.compile(r"[^A-Za-z0-9_\-]+")


#: The readiness probe object (written by ``Storage.ensure_bucket``, read by ``Storage.ping``).
READY_PROBE_KEY = "health/ready"
READY_PROBE_BODY = b"ok"


def raw_prefix(trace_id: str) -> str:
    """``traces/{trace}/raw/``."""
    return f"traces/{check_token(trace_id, 'trace_id')}/raw/"


def raw_key(trace_id: str, name: str) -> str:
    """S3 key of one raw file (the name is validated)."""
    return raw_prefix(trace_id) + check_name(name).name


def trace_prefix(trace_id: str) -> str:
    """``traces/{trace}/`` (raw files and prepared parts)."""
    return f"traces/{check_token(trace_id, 'trace_id')}/"


def parts_prefix(trace_id: str) -> str:
    """``traces/{trace}/parts/``: per-unit prepared results."""
    return trace_prefix(trace_id) + "parts/"


def part_key(trace_id: str, unit: str, etag: str) -> str:
    """Key of one unit's prepared result, addressed by the raw object's ETag (idempotent)."""
    safe_etag = re.sub(r"[^A-Za-z0-9\-]", "_", etag) or "none"
    return f"{parts_prefix(trace_id)}{unit}/{safe_etag}.msgpack"


def bundles_prefix(trace_id: str) -> str:
    """``bundles/{trace}/``: every bundle version of a trace."""
    return f"bundles/{check_token(trace_id, 'trace_id')}/"


def bundle_prefix(trace_id: str, bundle_hash: str) -> str:
    """``bundles/{trace}/{hash}/``: one content-addressed bundle."""
    return f"{bundles_prefix(trace_id)}{check_token(bundle_hash, 'bundle_hash')}/"


def split_raw_key(key: str) -> tuple[str, str]:
    """``traces/{trace}/raw/{name}`` -> ``(trace, name)``; :class:`ValidationError` otherwise.

    The name is validated like an upload name, so keys outside a trace's raw/
    prefix, nested paths and path tricks are all refused here.
    """
    parts = key.split("/")
    if len(parts) != 4 or parts[0] != "traces" or parts[2] != "raw":
        raise ValidationError(f"{key!r} is not under traces/<trace>/raw/<file>", field="key")
    trace_id = check_token(parts[1], "trace_id")
    return trace_id, check_name(parts[3], "key").name


def decode_event_key(key: str) -> str:
    """An S3 notification's object key, URL-decoded (``+`` is a space)."""
    return unquote_plus(key)


_KEY_SAFE = re.compile(r"[^A-Za-z0-9_\-]")


def kv_token(name: str) -> str:
    """A file name as one KV key token (``.`` and other characters escaped as ``=XX``)."""
    return _KEY_SAFE.sub(lambda m: "".join(f"={b:02X}" for b in m.group(0).encode()), name)


def record_key(trace_id: str) -> str:
    """KV key of the TraceRecord."""
    return subjects.kv_key(trace_id)


def expected_key(trace_id: str) -> str:
    """KV key of the ExpectedSet."""
    return subjects.kv_key(trace_id, "expected")


def file_key(trace_id: str, name: str) -> str:
    """KV key of one FileRecord."""
    return subjects.kv_key(trace_id, "files", kv_token(name))


def unit_key(trace_id: str, unit: str) -> str:
    """KV key of one UnitRecord."""
    return subjects.kv_key(trace_id, "units", kv_token(unit))


def declared_key(trace_id: str, name: str) -> str:
    """KV key of one DeclaredUpload (the size an upload URL was issued for)."""
    return subjects.kv_key(trace_id, "declared", kv_token(name))


#: A sim's result document.
RESULT_FILE = "result.json"


#: A sim's per-kernel predictions (columnar).
KERNELS_FILE = "kernels.npz"


def result_prefix(run_id: str, sim_id: str) -> str:
    """``results/{run}/{sim}/``."""
    return f"results/{run_id}/{sim_id}/"


def result_key(run_id: str, sim_id: str) -> str:
    """S3 key of a sim's ``result.json``."""
    return result_prefix(run_id, sim_id) + RESULT_FILE


def kernels_key(run_id: str, sim_id: str) -> str:
    """S3 key of a sim's ``kernels.npz``."""
    return result_prefix(run_id, sim_id) + KERNELS_FILE


#: A sim's fitted step-time model (cache).
STEP_MODEL_FILE = "stepmodel.json"


def step_model_key(run_id: str, sim_id: str) -> str:
    """S3 key of a sim's cached step model: ``results/{run}/{sim}/stepmodel.json``."""
    return f"results/{run_id}/{sim_id}/{STEP_MODEL_FILE}"


#: KV key prefix (bucket ``cascade-meta``) of custom GPU specs.
#: KV key prefix of custom GPU specs.
CUSTOM_SPEC_PREFIX = "gpus"


def custom_spec_key(spec_id: str) -> str:
    """KV key of a stored custom spec."""
    return subjects.kv_key(CUSTOM_SPEC_PREFIX, _SLUG.sub("_", spec_id))
