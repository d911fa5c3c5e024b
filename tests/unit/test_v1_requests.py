"""What /v1 reads from a request without a server: a text prompt's approximate token count,
the fast prompt counter (the same counts and errors as the generic checks), and a model's
context window (the estimates against a finished sim: tests/integration/test_v1.py,
test_v1_limits.py)."""

from __future__ import annotations

import msgspec
import pytest

from cascade.serving.contexts import DEFAULT_CONTEXT_TOKENS, context_length


def test_approximate_tokens_rule() -> None:
    from cascade.serving.prompts import approximate_tokens

    assert approximate_tokens("Hello, my name is") == 5
    assert approximate_tokens("x" * 400) == 100
    assert approximate_tokens("") == 1


@pytest.mark.parametrize("prompt", [
    [1, 2, 3], "hello world", ["a b", "c"], [[1, 2], [3]], [], [[1], []], [1, "a"], [True], None, 5,
    [[1, True]], [1.5], "", [[]], list(range(5000)),
])
def test_fast_prompt_counter_matches_the_generic_checks(prompt: object) -> None:
    """The msgspec fast path counts exactly what the generic checks count, and fails the same way."""
    from cascade.errors import ValidationError
    from cascade.serving.prompts import PromptCounter, count_prompt_json
    from cascade.serving.prompts import count_prompts as _count_prompts

    counter = PromptCounter("")

    def outcome(fn: object, arg: object) -> object:
        try:
            return fn(arg, counter)  # type: ignore[operator]
        except ValidationError as exc:
            return ("error", exc.field, str(exc))

    expected = outcome(_count_prompts, prompt)
    assert outcome(count_prompt_json, msgspec.json.encode(prompt)) == expected
    assert outcome(count_prompt_json, msgspec.Raw(b" " + msgspec.json.encode(prompt))) == expected


def test_context_table() -> None:
    assert context_length("facebook/opt-125m eager greedy generation") == (2048, True)
    assert context_length("meta-llama/Llama-3.1-8B-Instruct") == (131_072, True)
    assert context_length("meta-llama/Meta-Llama-3-8B") == (8192, True)
    assert context_length("something new") == (DEFAULT_CONTEXT_TOKENS, False)
