"""Prompt tokens of OpenAI-style requests (``/v1`` completions and chat completions).

Token-id prompts are counted exactly. Text is counted with a ``tokenizers`` tokenizer.json when
one is configured (:class:`PromptCounter`), else approximated as max(words and punctuation marks,
characters / 4) and marked approximate. Chat prompts are always approximate (the chat template
is unknown): message contents plus 4 tokens per message and 3 for the reply's priming.
"""

from __future__ import annotations

import math
import re
from typing import Any

import msgspec

from cascade.errors import ConfigError, ValidationError

#: The environment variable naming a tokenizer.json (the api's ``tokenizer`` setting wins).
TOKENIZER_ENV = "CASCADE_TOKENIZER"

_WORDS = re.compile(r"\w+|[^\w\s]", re.UNICODE)


class PromptCounter:
    """Counts prompt tokens: a ``tokenizers`` tokenizer.json when configured, else approximate."""

    def __init__(self, tokenizer_path: str = "") -> None:
        self.path = tokenizer_path
        self._tok: Any = None
        if tokenizer_path:
            from tokenizers import Tokenizer

            try:
                self._tok = Tokenizer.from_file(tokenizer_path)
            except Exception as exc:  # noqa: BLE001 - any load failure is a config error
                raise ConfigError(TOKENIZER_ENV, tokenizer_path,
                                  f"the path of a readable tokenizer.json ({exc})") from None

    @property
    def exact(self) -> bool:
        return self._tok is not None

    def count(self, text: str) -> int:
        """Tokens in ``text`` (exact with a tokenizer, else the approximation)."""
        if self._tok is not None:
            return len(self._tok.encode(text).ids)
        return approximate_tokens(text)


def approximate_tokens(text: str) -> int:
    """max(words and punctuation marks, characters / 4), at least 1."""
    return max(1, len(_WORDS.findall(text)), math.ceil(len(text) / 4))


def count_prompts(value: Any, counter: PromptCounter) -> tuple[list[int], bool]:
    """(token count per prompt, approximate?) of an OpenAI ``prompt`` value."""
    if value is None:
        raise ValidationError("is required", field="prompt")
    if isinstance(value, str):
        return [counter.count(value)], not counter.exact
    if isinstance(value, list):
        if not value:
            raise ValidationError("must not be empty", field="prompt")
        if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return [len(value)], False
        if all(isinstance(v, str) for v in value):
            return [counter.count(v) for v in value], not counter.exact
        if all(isinstance(v, list) for v in value):
            counts = []
            for i, ids in enumerate(value):
                if not ids or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
                    raise ValidationError("expected a non-empty list of token ids", field=f"prompt[{i}]")
                counts.append(len(ids))
            return counts, False
    raise ValidationError("expected a string, a list of strings, a list of token ids or a list "
                          "of token-id lists", field="prompt")


_IDS = msgspec.json.Decoder(list[int])
_TEXTS = msgspec.json.Decoder(list[str])
_ID_LISTS = msgspec.json.Decoder(list[list[int]])
_TEXT = msgspec.json.Decoder(str)


def count_prompt_json(raw: bytes | msgspec.Raw, counter: PromptCounter) -> tuple[list[int], bool]:
    """:func:`count_prompts` of a prompt's raw JSON, validated by msgspec at C speed.

    Token-id lists (the common case, possibly thousands of ids) are checked without a
    Python loop; anything the typed decoders reject goes through the generic checks,
    which name what is wrong.
    """
    raw = bytes(raw)
    head = raw.lstrip()[:1]
    try:
        if head == b'"':
            return [counter.count(_TEXT.decode(raw))], not counter.exact
        if head == b"[":
            try:
                ids = _IDS.decode(raw)
                if ids:
                    return [len(ids)], False
            except msgspec.ValidationError:
                try:
                    texts = _TEXTS.decode(raw)
                    return [counter.count(t) for t in texts], not counter.exact
                except msgspec.ValidationError:
                    lists = _ID_LISTS.decode(raw)
                    if all(lists):
                        return [len(ids) for ids in lists], False
    except msgspec.ValidationError:
        pass
    return count_prompts(msgspec.json.decode(raw) if raw else None, counter)


def count_messages(messages: Any, counter: PromptCounter) -> int:
    """Prompt tokens of a chat request's ``messages`` (always approximate: see the module)."""
    if not isinstance(messages, list) or not messages:
        raise ValidationError("expected a non-empty list of messages", field="messages")
    total = 3
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
            raise ValidationError("expected an object with 'role' and 'content'", field=f"messages[{i}]")
        content = msg.get("content")
        text = ""
        if isinstance(content, str):
            text = content
        elif isinstance(content, list):
            parts = []
            for j, part in enumerate(content):
                if not isinstance(part, dict):
                    raise ValidationError("expected a content part object", field=f"messages[{i}].content[{j}]")
                if part.get("type") == "text":
                    parts.append(str(part.get("text", "")))
            text = "\n".join(parts)
        elif content is not None:
            raise ValidationError("expected a string or a list of content parts", field=f"messages[{i}].content")
        total += 4 + (counter.count(text) if text else 0)
    return total
