"""Record tests/data/kineto-cpu-tiny.pt.trace.json.gz: a tiny model under the PyTorch profiler
on the CPU (record_shapes=True), forward and backward, two ProfilerStep#N steps.

Run with a venv that has torch: ``.venv/bin/python tests/data/make_kineto_cpu_trace.py``.
The model's sizes are what tests/unit/test_kineto.py checks the shapes against.
"""

from __future__ import annotations

import gzip
import shutil
import tempfile
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F
from torch.profiler import ProfilerActivity, profile, record_function

OUT = Path(__file__).with_name("kineto-cpu-tiny.pt.trace.json.gz")


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(100, 32)
        self.conv = nn.Conv2d(3, 8, kernel_size=3, stride=2, padding=1)
        self.norm = nn.LayerNorm(32)
        self.qkv = nn.Linear(32, 96)
        self.out = nn.Linear(32, 10)

    def forward(self, tokens: torch.Tensor, image: torch.Tensor) -> torch.Tensor:
        x = self.emb(tokens)                      # [2, 16, 32]
        x = self.norm(x)
        q, k, v = self.qkv(x).view(2, 16, 3, 4, 8).permute(2, 0, 3, 1, 4)  # [2, 4, 16, 8] each
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + a.transpose(1, 2).reshape(2, 16, 32)
        y = self.conv(image)                      # [2, 8, 8, 8]
        s = torch.softmax(torch.bmm(x, x.transpose(1, 2)), dim=-1)  # [2, 16, 16]
        return self.out(F.gelu(x)).sum() + y.float().mean() + s.sum()


def main() -> None:
    torch.manual_seed(0)
    model = Tiny()
    tokens = torch.randint(0, 100, (2, 16))
    image = torch.randn(2, 3, 16, 16)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(2):
            with record_function("step:prefill:tokens=32"):
                loss = model(tokens, image)
                loss.backward()
            prof.step()
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(raw))
        with raw.open("rb") as src, gzip.open(OUT, "wb", compresslevel=9) as dst:
            shutil.copyfileobj(src, dst)
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
