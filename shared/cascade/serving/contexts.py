"""Context windows of known models (prompt + output tokens a request may hold).

:func:`context_length` finds a model family in a trace's workload text (e.g.
``"facebook/opt-125m eager greedy generation"``) and returns its maximum context
(Hugging Face ``max_position_embeddings``). Unknown workloads get
:data:`DEFAULT_CONTEXT_TOKENS`, the server's own bound on one request.
"""

from __future__ import annotations

import re

#: Bound for workloads whose model is not in :data:`KNOWN_CONTEXTS` (tokens).
DEFAULT_CONTEXT_TOKENS = 32_768

#: (pattern on the lower-cased workload text, context tokens); first match wins, so
#: more specific names come first.
KNOWN_CONTEXTS: tuple[tuple[str, int], ...] = (
    (r"\bopt-\d", 2048),
    (r"\bgpt2\b|\bgpt-2\b|distilgpt2", 1024),
    (r"gpt-j|gpt-neox|pythia", 2048),
    (r"llama-2|llama2", 4096),
    (r"llama-3\.[123]|llama3\.[123]", 131_072),
    (r"llama-3|llama3", 8192),
    (r"mistral-7b-v0\.1", 8192),
    (r"mistral|mixtral", 32_768),
    (r"qwen2\.5|qwen2|qwen3", 32_768),
    (r"phi-2", 2048),
    (r"phi-3", 4096),
    (r"gemma-2|gemma2", 8192),
    (r"gemma", 8192),
    (r"falcon", 2048),
    (r"bloom", 2048),
)
_COMPILED = tuple((re.compile(p), n) for p, n in KNOWN_CONTEXTS)


def context_length(workload: str) -> tuple[int, bool]:
    """(context tokens, known?) of the model named in ``workload``.

    ``known`` is False when no family matched and the default bound applies.
    """
    text = workload.lower()
    for pattern, tokens in _COMPILED:
        if pattern.search(text):
            return tokens, True
    return DEFAULT_CONTEXT_TOKENS, False
