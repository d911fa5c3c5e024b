"""Automatic step markers (programs.profiler.autostep) in a Python COMMAND run the way
`cascade profile` runs it, with stand-in `transformers` and `vllm` packages on the path that
have the real module layout (neither library is needed)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HF_UTILS = '''
class GenerationMixin:
    def generate(self, n):
        for _ in range(n):
            self(1)
        return n
'''
HF_MODEL = '''
from transformers.generation.utils import GenerationMixin

class Hook:
    def __init__(self, hooks, fn):
        self.hooks, self.fn = hooks, fn
    def remove(self):
        self.hooks.remove(self.fn)

class TinyLM(GenerationMixin):
    def __init__(self):
        self.hooks = []
    def register_forward_hook(self, fn):
        self.hooks.append(fn)
        return Hook(self.hooks, fn)
    def __call__(self, x):
        for fn in list(self.hooks):
            fn(self, (x,), x)
        return x
'''
VLLM_ENGINE = '''
class LLMEngine:
    def __init__(self, steps):
        self.left = steps
    def step(self):
        self.left -= 1
        return [] if self.left else ["done"]
'''
VLLM_LLM = '''
from vllm.engine.llm_engine import LLMEngine

class LLM:
    def __init__(self, steps):
        self.llm_engine = LLMEngine(steps)
    def generate(self):
        out = []
        while not out:
            out = self.llm_engine.step()
        return out
'''


def _packages(root: Path) -> Path:
    files = {"transformers/__init__.py": "", "transformers/generation/__init__.py": "",
             "transformers/generation/utils.py": HF_UTILS, "transformers/tiny.py": HF_MODEL,
             "vllm/__init__.py": "from vllm.entrypoints.llm import LLM\n",
             "vllm/engine/__init__.py": "", "vllm/engine/llm_engine.py": VLLM_ENGINE,
             "vllm/entrypoints/__init__.py": "", "vllm/entrypoints/llm.py": VLLM_LLM}
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


SCRIPT = '''
from transformers.tiny import TinyLM
from vllm import LLM
model = TinyLM()
model.generate(7)          # 7 forwards: 7 steps
model(1)                   # outside generate: no step
LLM(steps=5).generate()    # 5 engine steps
'''


@pytest.mark.parametrize("autostep", ["1", "0"])
def test_generate_loops_mark_their_steps_in_the_baseline_pass(tmp_path: Path, autostep: str) -> None:
    from programs.profiler import ENV_STEPS

    libs = _packages(tmp_path / "libs")
    script = tmp_path / "work.py"
    script.write_text(SCRIPT)
    marks = tmp_path / "steps.txt"
    env = {**os.environ, "PYTHONPATH": f"{libs}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           ENV_STEPS: str(marks), "CASCADE_PROFILE_AUTOSTEP": autostep}
    subprocess.run([sys.executable, "-m", "programs.profiler.torchrun", "--no-profile", "--",
                    str(script)], env=env, check=True, cwd=tmp_path)
    lines = marks.read_text().split() if marks.exists() else []
    assert len(lines) == (12 if autostep == "1" else 0)
    assert lines == sorted(lines)  # monotonic timestamps, one per step
