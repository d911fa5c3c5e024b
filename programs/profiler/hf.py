"""The Hugging Face recipe: greedy ``generate`` of a causal LM, as ``cascade profile hf`` runs it.

``python -m programs.profiler.hf --model ID_OR_CONFIG [--random-init] --prompt TEXT
--max-new-tokens N --repeats R --warmup W`` follows the ``CASCADE_PROFILE_PASS`` protocol:

- ``baseline``: W warm-up generations, then R timed ones (device synchronised), per-step
  times from forward hooks; writes ``CASCADE_PROFILE_BASELINE``.
- ``timeline``: W warm-ups, then one generation under the PyTorch profiler with a
  ``step:prefill|decode:tokens=..:context=..`` range around every forward; writes
  ``CASCADE_PROFILE_TIMELINE``.
- ``baseline+timeline``: both of the above in one process, the baseline first (before the
  profiler is imported): ``cascade profile hf`` runs this, so the model is built and torch and
  transformers imported once (on a CPU those take most of a pass).
- ``nsys``: W warm-ups and one generation with an NVTX ``step:..`` range per forward
  (Nsight Systems, around the process, records).
- ``instructions`` (or none): W warm-ups and one generation, nothing recorded here (the
  tracer records; select kernels with ``--kernel-range``).

The defaults are the OPT-125m sample workload (``samples/opt125m-h100-e2e``): 32 new tokens
from ``"Hello, my name is"``, 4 repeats, 1 warm-up, eager attention, fp16 on a GPU.
``--random-init`` builds the model from its configuration (a ``config.json`` path, a
folder holding one, a hub id already in the Hugging Face cache, or the built-in OPT-125m
shape for ``facebook/opt-125m``) with random weights. Nothing is ever downloaded
(:mod:`programs.profiler.hfsource`; ``HF_HUB_OFFLINE=1``): a model that is not here is one
error line saying what to pass instead. Without a
tokenizer the prompt is encoded with OPT's ids for the default prompt, else one id per byte.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from cascade.errors import CascadeError, ValidationError
from cascade.traces.baseline import Baseline, write_baseline
from programs.profiler import ENV_BASELINE, ENV_PASS, ENV_TIMELINE
from programs.profiler.hfsource import cached_snapshot, resolve_model

DEFAULT_PROMPT = "Hello, my name is"
#: OPT's tokenizer ids of DEFAULT_PROMPT: </s> Hello , Ġmy Ġname Ġis
OPT_PROMPT_IDS = (2, 31414, 6, 127, 766, 16)
#: Files of which a folder needs one to have a tokenizer.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")


def add_recipe_arguments(p: argparse.ArgumentParser) -> None:
    """The recipe's options (shared by ``cascade profile hf`` and this module)."""
    p.add_argument("--model", required=True,
                   help="hub id, model folder, or config.json (with --random-init)")
    p.add_argument("--random-init", action="store_true",
                   help="random weights from the model's configuration (nothing downloaded)")
    p.add_argument("--tokenizer", default=None, help="tokenizer id or folder (default: the model's)")
    p.add_argument("--prompt", default=DEFAULT_PROMPT)
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=4, help="timed generations in the baseline")
    p.add_argument("--warmup", type=int, default=1, help="untimed generations first")
    p.add_argument("--device", default="auto", help="auto (cuda when available), cuda, cpu")
    p.add_argument("--dtype", default="auto", choices=("auto", "fp16", "bf16", "fp32"),
                   help="auto: fp16 on a GPU, fp32 on the CPU")


class Recipe:
    """A loaded model, its inputs, and step hooks."""

    def __init__(self, args: argparse.Namespace) -> None:
        import torch

        if args.max_new_tokens < 1 or args.repeats < 1 or args.warmup < 0:
            raise ValidationError("--max-new-tokens and --repeats must be >= 1, --warmup >= 0",
                                  field="--max-new-tokens")
        self.torch = torch
        self.args = args
        self.device = torch.device(
            ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device)
        dtype = args.dtype if args.dtype != "auto" else ("fp16" if self.device.type == "cuda" else "fp32")
        self.dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
        self.model = self._load_model()
        self.input_ids = self._encode().to(self.device)
        self.steps: list[tuple[str, int, int, float]] = []
        self._range: Any = None
        self._t0 = 0.0
        self._forwards = 0
        self.model.register_forward_pre_hook(self._pre, with_kwargs=True)
        self.model.register_forward_hook(self._post)
        self.profiling = False
        self.nvtx = os.environ.get(ENV_PASS) == "nsys" and self.device.type == "cuda"

    def _load_model(self) -> Any:
        from transformers import AutoConfig, AutoModelForCausalLM

        source = resolve_model(self.args.model, random_init=self.args.random_init)
        if source.kind == "builtin":
            cfg = dict(source.config)
            config = AutoConfig.for_model(cfg.pop("model_type"), **cfg)
        else:
            config = AutoConfig.from_pretrained(str(source.folder), local_files_only=True)
        if self.args.random_init:
            config._attn_implementation = "eager"
            self.torch.manual_seed(0)
            model = AutoModelForCausalLM.from_config(config, attn_implementation="eager",
                                                     dtype=self.dtype)
        else:
            model = AutoModelForCausalLM.from_pretrained(str(source.folder), attn_implementation="eager",
                                                         dtype=self.dtype, local_files_only=True)
        return model.to(self.device).eval()

    def _encode(self) -> Any:
        torch = self.torch
        try:
            from transformers import AutoTokenizer

            name = self.args.tokenizer or self.args.model
            found = cached_snapshot(name) if not Path(name).exists() else Path(name)
            if found is None:
                raise OSError(f"no tokenizer files for {name} here")
            folder = found.parent if found.is_file() else found
            if not any((folder / f).is_file() for f in TOKENIZER_FILES):
                raise OSError(f"no tokenizer files in {folder}")
            tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
            ids = tok(self.args.prompt, return_tensors="pt").input_ids
            if int(ids.numel()) == 0:
                raise ValueError("the tokenizer gave no ids")
            return ids
        except (OSError, ValueError, ImportError):  # no tokenizer files here: use known ids
            vocab = int(self.model.config.vocab_size)
            if self.args.prompt == DEFAULT_PROMPT and vocab > max(OPT_PROMPT_IDS):
                ids = list(OPT_PROMPT_IDS)
            else:
                bos = getattr(self.model.config, "bos_token_id", None) or 0
                ids = [int(bos)] + [3 + b % max(1, vocab - 3) for b in self.args.prompt.encode()]
            return torch.tensor([ids], dtype=torch.long)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize()

    def _pre(self, _module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        tokens = int(ids.shape[-1]) if ids is not None else -1
        mask = kwargs.get("attention_mask")
        context = int(mask.shape[-1]) if mask is not None else tokens
        kind = "prefill" if self._forwards == 0 else "decode"
        self._forwards += 1
        self._sync()
        self._t0 = time.perf_counter()
        self.steps.append((kind, tokens, context, 0.0))
        if self.nvtx:
            self.torch.cuda.nvtx.range_push(f"step:{kind}:tokens={tokens}:context={context}")
        if self.profiling:
            from torch.profiler import record_function

            self._range = record_function(f"step:{kind}:tokens={tokens}:context={context}")
            self._range.__enter__()

    def _post(self, _module: Any, _args: Any, _out: Any) -> None:
        if self._range is not None:
            self._range.__exit__(None, None, None)
            self._range = None
        if self.nvtx:
            self.torch.cuda.nvtx.range_pop()
        self._sync()
        kind, tokens, context, _ = self.steps[-1]
        self.steps[-1] = (kind, tokens, context, (time.perf_counter() - self._t0) * 1e3)

    def generate(self) -> tuple[float, list[float]]:
        """One greedy generation; (end-to-end ms, per-step ms)."""
        self.steps = []
        self._forwards = 0
        n = self.args.max_new_tokens
        self._sync()
        t0 = time.perf_counter()
        with self.torch.inference_mode():
            out = self.model.generate(self.input_ids, attention_mask=self.torch.ones_like(self.input_ids),
                                      max_new_tokens=n, min_new_tokens=n, do_sample=False,
                                      use_cache=True, pad_token_id=0)
        self._sync()
        e2e = (time.perf_counter() - t0) * 1e3
        if int(out.shape[-1]) - int(self.input_ids.shape[-1]) != n:
            raise RuntimeError(f"generated {int(out.shape[-1]) - int(self.input_ids.shape[-1])} "
                               f"tokens, expected {n}")
        return e2e, [s[3] for s in self.steps]

    def device_name(self) -> str:
        if self.device.type == "cuda":
            return str(self.torch.cuda.get_device_name(self.device))
        return "cpu"

    def baseline(self) -> Baseline:
        """W warm-ups, R timed generations."""
        for _ in range(self.args.warmup):
            self.generate()
        runs = [self.generate() for _ in range(self.args.repeats)]
        return Baseline(workload=self.describe(), device=self.device_name(), warmup=self.args.warmup,
                        e2e_ms=[r[0] for r in runs], step_ms=[r[1] for r in runs],
                        tokens=self.args.max_new_tokens)

    def timeline(self, out: Path) -> float:
        """W warm-ups, then one profiled generation written to ``out``; its e2e ms."""
        from programs.profiler.torchtimeline import profiled

        for _ in range(self.args.warmup):
            self.generate()
        self.profiling = True
        try:
            with profiled(out, step_markers=False):
                e2e, _ = self.generate()
        finally:
            self.profiling = False
        return e2e

    def describe(self) -> str:
        a = self.args
        return (f"hf generate {a.model}{' (random init)' if a.random_init else ''}, "
                f"{a.max_new_tokens} new tokens from {a.prompt!r}, greedy, eager, "
                f"{str(self.dtype).removeprefix('torch.')}, {self.device.type}")


def main(argv: list[str] | None = None) -> int:
    """Entry point (one pass, chosen by CASCADE_PROFILE_PASS)."""
    parser = argparse.ArgumentParser(prog="python -m programs.profiler.hf", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_recipe_arguments(parser)
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the recipe never downloads (see hfsource)
    try:
        resolve_model(args.model, random_init=args.random_init)
    except CascadeError as exc:
        print(f"cascade profile hf: {exc}", file=sys.stderr)
        return 2
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        print(f"cascade profile hf: {exc.name} is not installed: pip install torch transformers "
              "(or cascade[hf])", file=sys.stderr)
        return 2
    recipe = Recipe(args)
    which = os.environ.get(ENV_PASS, "")
    if which in ("baseline", "baseline+timeline"):
        base = recipe.baseline()
        target = os.environ.get(ENV_BASELINE)
        if target:
            write_baseline(Path(target), base)
        print(f"baseline: e2e {base.summary()['e2e_ms']:.2f} ms mean of {len(base.e2e_ms)}", file=sys.stderr)
    if which in ("timeline", "baseline+timeline"):
        e2e = recipe.timeline(Path(os.environ.get(ENV_TIMELINE) or "timeline.pt.trace.json"))
        print(f"timeline pass: profiled e2e {e2e:.2f} ms", file=sys.stderr)
    elif which != "baseline":
        for _ in range(args.warmup):
            recipe.generate()
        e2e, _ = recipe.generate()
        print(f"generate: e2e {e2e:.2f} ms", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
