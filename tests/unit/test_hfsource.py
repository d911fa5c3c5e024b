"""Where the ``hf`` recipe's model comes from, offline: built-in OPT-125m shape, config files,
model folders, the Hugging Face cache, and one clear error for anything else."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from programs.profiler.hfsource import (
    OPT_125M_CONFIG,
    ModelSourceError,
    cached_snapshot,
    resolve_model,
)


@pytest.fixture(autouse=True)
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    return tmp_path / "hf-home" / "hub"


def test_opt125m_is_built_in_with_random_init() -> None:
    src = resolve_model("facebook/opt-125m", random_init=True)
    assert src.kind == "builtin" and src.folder is None
    assert (src.config["hidden_size"], src.config["num_hidden_layers"], src.config["ffn_dim"],
            src.config["vocab_size"]) == (768, 12, 3072, 50272)
    assert src.config == OPT_125M_CONFIG and src.config is not OPT_125M_CONFIG


def test_unknown_hub_id_says_what_to_pass_instead() -> None:
    with pytest.raises(ModelSourceError) as err:
        resolve_model("facebook/opt-999m", random_init=True)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("--model: facebook/opt-999m is not on this machine")
    assert "--model facebook/opt-125m --random-init" in msg and "config.json" in msg


def test_weights_are_never_assumed_without_random_init() -> None:
    with pytest.raises(ModelSourceError, match="not on this machine"):
        resolve_model("facebook/opt-125m", random_init=False)


def test_config_file_and_folder(tmp_path: Path) -> None:
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "opt"}))
    for given in (folder, folder / "config.json"):
        src = resolve_model(str(given), random_init=True)
        assert src.kind == "folder" and src.folder == folder
    with pytest.raises(ModelSourceError, match="no weights; add --random-init"):
        resolve_model(str(folder), random_init=False)
    (folder / "model.safetensors").write_bytes(b"x")
    assert resolve_model(str(folder), random_init=False).folder == folder
    other = tmp_path / "opt-shape.json"
    other.write_text(json.dumps({"model_type": "opt", "hidden_size": 64}))
    assert resolve_model(str(other), random_init=True).config["hidden_size"] == 64
    with pytest.raises(ModelSourceError, match="no such file or folder"):
        resolve_model(str(tmp_path / "missing" / "config.json"), random_init=True)
    with pytest.raises(ModelSourceError, match="no config.json"):
        resolve_model(str(tmp_path), random_init=True)


def test_hub_id_found_in_the_cache(empty_cache: Path) -> None:
    snap = empty_cache / "models--acme--tiny" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps({"model_type": "opt"}))
    assert cached_snapshot("acme/tiny") == snap
    assert resolve_model("acme/tiny", random_init=True).folder == snap
    with pytest.raises(ModelSourceError, match="cached copy .* has no weights"):
        resolve_model("acme/tiny", random_init=False)
