"""The scenario request is built from the serving registries (no second list), and described
models share one wiring (:mod:`cascade.serving.description`)."""

from __future__ import annotations

import msgspec
import pytest

from cascade.errors import TooLargeError, ValidationError
from cascade.serving.arrivals import ARRIVALS, LENGTHS
from cascade.serving.description import (
    EXAMPLE_CONFIGS,
    MAX_CONFIG_BYTES,
    checked_config,
    example_config,
)
from cascade.serving.requests import (
    ARRIVAL_REQUESTS,
    LENGTH_REQUESTS,
    ROUTER_REQUESTS,
    SCHEDULER_REQUESTS,
    ScenarioRequest,
)
from cascade.serving.routers import ROUTERS
from cascade.serving.sim import SCHEDULERS


def test_every_registered_plug_in_reaches_the_request() -> None:
    assert sorted(ARRIVAL_REQUESTS) == ARRIVALS.names()
    assert sorted(LENGTH_REQUESTS) == LENGTHS.names()
    assert sorted(ROUTER_REQUESTS) == ROUTERS.names()
    assert sorted(SCHEDULER_REQUESTS) == SCHEDULERS.names()
    for name, struct in SCHEDULER_REQUESTS.items():
        library = SCHEDULERS.get(name)[0]
        settings = msgspec.structs.fields(struct)[0].type
        assert {f.name for f in msgspec.structs.fields(settings)} == {f.name for f in msgspec.structs.fields(library)}
    # request Structs are named apart from the simulator's classes
    assert "VllmScheduler" not in {s.__name__ for s in SCHEDULER_REQUESTS.values()}


def test_the_request_decodes_registered_settings_and_refuses_others() -> None:
    req = msgspec.json.decode(b'{"model": "m", "arrival": {"pattern": "gamma", "rate": 2, "cv": 3},'
                              b'"router": "least_outstanding", "scheduler": {"name": "static", "settings":'
                              b'{"batch_size": 4}}, "slos": {"ttft_ms": 100}}', type=ScenarioRequest)
    assert req.arrival.cv == 3 and req.scheduler.settings.batch_size == 4 and req.slos.ttft_ms == 100
    with pytest.raises(msgspec.ValidationError, match="bogus"):
        msgspec.json.decode(b'{"model": "m", "slos": {"bogus": 1}}', type=ScenarioRequest)


def test_bundled_configs_and_config_checks() -> None:
    for name in EXAMPLE_CONFIGS:
        assert checked_config(example_config(name), "c")["hidden_size"] > 0
    with pytest.raises(ValidationError) as bad:
        checked_config({**example_config("qwen3-32b"), "vocab_size": -1}, "description.config")
    assert bad.value.field == "description.config.vocab_size"
    with pytest.raises(TooLargeError):
        checked_config({**example_config("qwen3-32b"), "pad": "x" * MAX_CONFIG_BYTES}, "description.config")
