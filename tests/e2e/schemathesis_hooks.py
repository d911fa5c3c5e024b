"""Schemathesis hooks of the contract test (loaded through ``SCHEMATHESIS_HOOKS``).

``/v1`` completions refuse ``max_tokens`` + the prompt over the *model's* context window
(``max_model_len`` in ``/v1/models``) with OpenAI's 400 ``context_length_exceeded``: a limit
of the model named in the body, which the route's schema cannot state. tests/schemathesis.toml
lets the built-in positive-data check accept a 400 on those two operations; this check
then fails every 400 to a schema-valid body there that is *not* that refusal.
"""

from __future__ import annotations

import json
from typing import Any

import schemathesis
from schemathesis.specs.openapi.checks import is_unexpected_http_status_case

#: Operations whose schema-valid bodies may exceed the model's context.
CONTEXT_BOUND = frozenset({"POST /v1/completions", "POST /v1/chat/completions"})


def context_exceeded(status: int, content: bytes) -> bool:
    """True for OpenAI's 400 ``context_length_exceeded`` answer."""
    if status != 400:
        return False
    try:
        error = json.loads(content)["error"]
    except (ValueError, KeyError, TypeError):
        return False
    return isinstance(error, dict) and error.get("code") == "context_length_exceeded"


@schemathesis.check
def positive_data_within_context(ctx: Any, response: Any, case: Any) -> bool | None:
    """A schema-valid /v1 body is refused only for exceeding the model's context window."""
    meta = case.meta
    if (case.operation.label not in CONTEXT_BOUND or meta is None
            or not meta.generation.mode.is_positive or is_unexpected_http_status_case(case)):
        return None
    if response.status_code == 400 and not context_exceeded(400, response.content):
        raise AssertionError("Schema-valid request rejected with 400 (not context_length_exceeded): "
                             + response.content.decode(errors="replace")[:300])
    return None


#: Operations whose schema-valid bodies may name a GPU the catalogue does not have (a free
#: string: aliases and custom specs are accepted too), refused with the ``unknown_gpu`` 400.
GPU_NAMING = frozenset({"POST /api/scenarios"})


@schemathesis.check
def positive_data_names_a_known_gpu(ctx: Any, response: Any, case: Any) -> bool | None:
    """A schema-valid POST /api/scenarios body is refused with a 400 only as ``unknown_gpu``."""
    meta = case.meta
    if (case.operation.label not in GPU_NAMING or meta is None
            or not meta.generation.mode.is_positive or is_unexpected_http_status_case(case)):
        return None
    if response.status_code == 400:
        try:
            code = json.loads(response.content).get("error")
        except (ValueError, AttributeError):
            code = None
        if code != "unknown_gpu":
            raise AssertionError("Schema-valid scenario rejected with 400 (not unknown_gpu): "
                                 + response.content.decode(errors="replace")[:300])
    return None
