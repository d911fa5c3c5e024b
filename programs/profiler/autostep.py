"""Automatic step markers for the generation loops Cascade knows, in any Python COMMAND.

``cascade profile`` runs a Python COMMAND through :mod:`programs.profiler.torchrun`, which
calls :func:`install` first. From then on, whenever these modules are imported (or if they
already were), their loops mark one :func:`programs.profiler.step` per step:

- **Hugging Face** ``transformers.generation.utils.GenerationMixin.generate``: every
  forward call of the model inside ``generate`` is one step (the prefill, then one per new
  token), through a forward hook registered for the call and removed after it.
- **vLLM** ``LLMEngine.step`` (``vllm.engine.llm_engine`` and ``vllm.v1.engine.llm_engine``),
  which ``LLM.generate`` calls once per scheduler iteration: every call is one step.

User code that calls :func:`programs.profiler.step` itself can turn this off with
``CASCADE_PROFILE_AUTOSTEP=0``. Nothing here imports torch, transformers or vLLM.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import os
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any

from programs import profiler as api

#: Set to 0 to leave a COMMAND's generation loops alone.
ENV_AUTOSTEP = "CASCADE_PROFILE_AUTOSTEP"
_MARK = "__cascade_autostep__"
_active = 0  # generate() calls in progress (nested generate calls mark once)


def _patch_hf(module: types.ModuleType) -> bool:
    mixin = getattr(module, "GenerationMixin", None)
    original = getattr(mixin, "generate", None)
    if mixin is None or original is None or getattr(original, _MARK, False):
        return False

    @functools.wraps(original)
    def generate(self: Any, *args: Any, **kwargs: Any) -> Any:
        global _active
        if _active:
            return original(self, *args, **kwargs)
        handle = self.register_forward_hook(lambda *_: api.step())
        _active += 1
        try:
            return original(self, *args, **kwargs)
        finally:
            _active -= 1
            handle.remove()

    setattr(generate, _MARK, True)
    mixin.generate = generate
    return True


def _patch_vllm(module: types.ModuleType) -> bool:
    engine = getattr(module, "LLMEngine", None)
    original = getattr(engine, "step", None)
    if engine is None or original is None or getattr(original, _MARK, False):
        return False

    @functools.wraps(original)
    def step(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return original(self, *args, **kwargs)
        finally:
            api.step()

    setattr(step, _MARK, True)
    engine.step = step
    return True


#: module name -> patch applied right after the module runs
PATCHES: dict[str, Callable[[types.ModuleType], bool]] = {
    "transformers.generation.utils": _patch_hf,
    "vllm.engine.llm_engine": _patch_vllm,
    "vllm.v1.engine.llm_engine": _patch_vllm,
}


class _Loader(importlib.abc.Loader):
    """The module's own loader, then the patch."""

    def __init__(self, inner: importlib.abc.Loader, patch: Callable[[types.ModuleType], bool]) -> None:
        self._inner = inner
        self._patch = patch

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        self._inner.exec_module(module)
        self._patch(module)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds the patched modules with the other finders and wraps their loaders."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        patch = PATCHES.get(fullname)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _Loader(spec.loader, patch)
                return spec
        return None


def install() -> list[str]:
    """Patch the known loops (now, or when they are imported); the modules patched now."""
    if os.environ.get(ENV_AUTOSTEP, "1").strip().lower() in ("0", "false", "no", "off"):
        return []
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
    return [name for name, patch in PATCHES.items()
            if name in sys.modules and patch(sys.modules[name])]
