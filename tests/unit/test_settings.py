"""Settings: defaults, CASCADE_* parsing, TOML file, validation errors naming the variable."""

from __future__ import annotations

import os
from pathlib import Path

import msgspec
import pytest

from cascade.errors import ConfigError
from cascade.platform.settings import Settings, env_var, load_settings, settings_doc


def test_defaults_without_environment() -> None:
    s = load_settings({})
    assert s.nats_url == "nats://127.0.0.1:4222"
    assert s.s3_endpoint == "http://127.0.0.1:8333"
    assert s.bucket == "cascade"
    assert (s.http_host, s.http_port) == ("127.0.0.1", 8080)
    assert s.api_tokens == []
    assert s.samples is True
    assert s.orchestrator_backend == "local"
    assert s.max_local_sims == max(1, os.cpu_count() or 1)
    assert s.data_path == Path(".cascade")


def test_environment_values_are_parsed() -> None:
    s = load_settings({
        "CASCADE_HTTP_PORT": " 9000 ",
        "CASCADE_API_TOKENS": "alpha, beta,,",
        "CASCADE_SAMPLES": "off",
        "CASCADE_LOG_LEVEL": "DEBUG",
        "CASCADE_JOB_ACK_WAIT_S": "2.5",
        "CASCADE_ORCHESTRATOR_BACKEND": "pool",
        "UNRELATED": "x",
    })
    assert s.http_port == 9000
    assert s.api_tokens == ["alpha", "beta"]
    assert s.samples is False
    assert s.log_level == "debug"
    assert s.job_ack_wait_s == 2.5
    assert s.orchestrator_backend == "pool"


@pytest.mark.parametrize(
    ("var", "value", "expected"),
    [
        ("CASCADE_HTTP_PORT", "eighty", "an integer >= 1 and <= 65535"),
        ("CASCADE_HTTP_PORT", "70000", "an integer >= 1 and <= 65535"),
        ("CASCADE_ORCHESTRATOR_BACKEND", "slurm", "one of"),
        ("CASCADE_SAMPLES", "maybe", "a boolean"),
        ("CASCADE_NATS_URL", "localhost:4222", "a URL like nats://"),
        ("CASCADE_JOB_MAX_DELIVER", "0", "an integer >= 1"),
        ("CASCADE_SIM_TIMEOUT_S", "soon", "a number > 0"),
        ("CASCADE_LOG_FORMAT", "xml", "one of auto, console, json"),
    ],
)
def test_invalid_values_name_the_variable(var: str, value: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings({var: value})
    assert info.value.variable == var
    assert expected in info.value.expected
    assert var in str(info.value) and repr(value) in str(info.value)


def test_toml_file_then_environment_precedence(tmp_path: Path) -> None:
    config = tmp_path / "cascade.toml"
    config.write_text('http_port = 9100\nbucket = "traces-x"\napi_tokens = ["t1"]\n')
    s = load_settings({"CASCADE_CONFIG": str(config), "CASCADE_BUCKET": "from-env"})
    assert s.http_port == 9100
    assert s.api_tokens == ["t1"]
    assert s.bucket == "from-env"


def test_toml_errors_name_file_and_key(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('http_port = "x"\n')
    with pytest.raises(ConfigError) as info:
        load_settings({"CASCADE_CONFIG": str(config)})
    assert info.value.variable == f"{config}:http_port"

    config.write_text("htp_port = 1\n")
    with pytest.raises(ConfigError, match="a known setting"):
        load_settings({"CASCADE_CONFIG": str(config)})

    with pytest.raises(ConfigError, match="CASCADE_CONFIG"):
        load_settings({"CASCADE_CONFIG": str(tmp_path / "missing.toml")})


def test_overrides_and_replace_are_validated() -> None:
    s = load_settings({}, http_port=1234)
    assert s.http_port == 1234
    assert s.replace(job_max_deliver=7).job_max_deliver == 7
    with pytest.raises(ConfigError):
        s.replace(http_port=-5)
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"http_port": "x"}, Settings)


def test_settings_doc_lists_every_field() -> None:
    rows = settings_doc()
    names = [r[0] for r in rows]
    assert names == [env_var(f) for f in Settings.__struct_fields__]
    assert all(desc and not desc.startswith(" (") for _, _, desc in rows)
    assert rows[names.index("CASCADE_HTTP_PORT")][:2] == ("CASCADE_HTTP_PORT", "8080")


def test_redacted_hides_secrets() -> None:
    s = load_settings({"CASCADE_S3_SECRET_KEY": "s3cr3t-v4lue", "CASCADE_API_TOKENS": "zq-token-9"})
    red = s.redacted()
    assert "s3cr3t-v4lue" not in repr(red) and "zq-token-9" not in repr(red)
    assert red["s3_secret_key"] == "***" and red["api_tokens"] == ["***"]
