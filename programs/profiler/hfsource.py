"""Where the ``hf`` recipe's model comes from, decided without a network or torch.

The recipe never downloads. ``--model`` is one of:

- a ``config.json`` file, or a folder holding one (with ``--random-init``: the
  architecture; without it the folder must also hold the weights);
- a hub id whose files are already in the Hugging Face cache (``$HF_HUB_CACHE``,
  ``$HF_HOME/hub``, ``~/.cache/huggingface/hub``);
- with ``--random-init``, a built-in architecture: ``facebook/opt-125m`` (the sample's
  workload) needs nothing on disk.

Anything else is one :class:`ModelSourceError` line saying what to pass instead, raised
before anything is started (``cascade profile`` checks it in the parent process).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from cascade.errors import ValidationError

#: facebook/opt-125m's config.json (the architecture; random weights need nothing else).
OPT_125M_CONFIG: dict[str, Any] = {
    "model_type": "opt", "architectures": ["OPTForCausalLM"], "hidden_size": 768,
    "num_hidden_layers": 12, "num_attention_heads": 12, "ffn_dim": 3072, "vocab_size": 50272,
    "max_position_embeddings": 2048, "word_embed_proj_dim": 768, "do_layer_norm_before": True,
    "activation_function": "relu", "pad_token_id": 1, "bos_token_id": 2, "eos_token_id": 2,
    "enable_bias": True, "layer_norm_elementwise_affine": True, "dropout": 0.1,
    "attention_dropout": 0.0, "activation_dropout": 0.0, "layerdrop": 0.0, "init_std": 0.02,
    "use_cache": True, "prefix": "</s>",
}

#: Hub ids whose architecture is built in (usable with ``--random-init`` offline).
BUILTIN_CONFIGS: dict[str, dict[str, Any]] = {"facebook/opt-125m": OPT_125M_CONFIG}

_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")

SourceKind = Literal["builtin", "folder"]


class ModelSourceError(ValidationError):
    """``--model`` names nothing the recipe can build offline; the message says what to pass."""


@dataclass(frozen=True)
class ModelSource:
    """A resolved ``--model``: a built-in architecture or a local folder with a config.json."""

    kind: SourceKind
    name: str
    """What the user passed (hub id or path)."""
    folder: Path | None = None
    """The folder holding config.json (and the weights, without --random-init)."""
    config: dict[str, Any] = field(default_factory=dict)
    """The built-in config (kind ``builtin``)."""


def hub_cache_dirs() -> list[Path]:
    """Folders the Hugging Face cache may be in, most specific first."""
    out: list[Path] = []
    if os.environ.get("HF_HUB_CACHE"):
        out.append(Path(os.environ["HF_HUB_CACHE"]))
    if os.environ.get("HUGGINGFACE_HUB_CACHE"):
        out.append(Path(os.environ["HUGGINGFACE_HUB_CACHE"]))
    if os.environ.get("HF_HOME"):
        out.append(Path(os.environ["HF_HOME"]) / "hub")
    xdg = os.environ.get("XDG_CACHE_HOME")
    out.append((Path(xdg) if xdg else Path.home() / ".cache") / "huggingface" / "hub")
    return out


def _has_weights(folder: Path) -> bool:
    try:
        return any(p.name.endswith(_WEIGHT_SUFFIXES) for p in folder.iterdir())
    except OSError:
        return False


def cached_snapshot(hub_id: str) -> Path | None:
    """The newest cached snapshot folder of ``hub_id`` holding a config.json, or None."""
    repo = "models--" + hub_id.replace("/", "--")
    for cache in hub_cache_dirs():
        snaps = cache / repo / "snapshots"
        try:
            found = [p for p in snaps.iterdir() if (p / "config.json").is_file()]
        except OSError:
            continue
        if found:
            return max(found, key=lambda p: p.stat().st_mtime)
    return None


_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")


def _looks_like_path(value: str) -> bool:
    return value.endswith(".json") or _HUB_ID.fullmatch(value) is None


def _what_instead(name: str) -> str:
    builtin = ", ".join(BUILTIN_CONFIGS)
    return (f"pass --random-init with a config.json or a model folder (built in, needing "
            f"nothing on disk: --model {builtin} --random-init), or download it first "
            f"(huggingface-cli download {name}) and pass its folder")


def resolve_model(name: str, *, random_init: bool) -> ModelSource:
    """Decide where ``--model`` comes from (see the module doc); :class:`ModelSourceError`
    naming what to pass instead when it cannot be built here."""
    if not name:
        raise ModelSourceError("empty: " + _what_instead("MODEL"), field="--model")
    path = Path(name).expanduser()
    if path.exists():
        folder = path.parent if path.is_file() else path
        if path.is_file() and path.name != "config.json" and path.suffix != ".json":
            raise ModelSourceError(f"{name}: a file must be a model's config.json",
                                   field="--model")
        if path.is_file() and path.name != "config.json":
            return _config_file(path, name, random_init)
        if not (folder / "config.json").is_file():
            raise ModelSourceError(f"{name}: no config.json in {folder}", field="--model")
        if not random_init and not _has_weights(folder):
            raise ModelSourceError(f"{name}: {folder} has a config.json but no weights; "
                                   "add --random-init to build the model from its architecture",
                                   field="--model")
        return ModelSource(kind="folder", name=name, folder=folder)
    if _looks_like_path(name):
        raise ModelSourceError(f"{name}: no such file or folder", field="--model")
    snapshot = cached_snapshot(name)
    if snapshot is not None and (random_init or _has_weights(snapshot)):
        return ModelSource(kind="folder", name=name, folder=snapshot)
    if random_init and name in BUILTIN_CONFIGS:
        return ModelSource(kind="builtin", name=name, config=dict(BUILTIN_CONFIGS[name]))
    if snapshot is not None:
        raise ModelSourceError(f"{name}: the cached copy ({snapshot}) has no weights; add "
                               "--random-init, or download the weights first "
                               f"(huggingface-cli download {name})", field="--model")
    raise ModelSourceError(f"{name} is not on this machine and the recipe never "
                           f"downloads: {_what_instead(name)}", field="--model")


def _config_file(path: Path, name: str, random_init: bool) -> ModelSource:
    """A config file not named config.json (``opt.json``): read it as a built-in-like config."""
    import json

    if not random_init:
        raise ModelSourceError(f"{name}: a config file alone has no weights; add --random-init",
                               field="--model")
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ModelSourceError(f"{name}: not a JSON config ({exc})", field="--model") from None
    if not isinstance(config, dict) or "model_type" not in config:
        raise ModelSourceError(f"{name}: a config needs a model_type (e.g. \"opt\")",
                               field="--model")
    return ModelSource(kind="builtin", name=name, config=config)
