"""`cascade bench resnet50`: a whole FP32 ResNet-50 training step predicted from its work alone.

The table (``data/resnet50-train-fp32-b32.kernels.csv.gz``) is one torchvision-style ResNet-50
training step at batch 32, 224x224, FP32 (forward, cross-entropy, backward, SGD with momentum,
foreach): every aten op PyTorch dispatches, recorded on the ``meta`` device (shapes, no data, no
GPU) in the profiler's own record form (``Input Dims``, ``Input type``, ``Concrete Inputs``) and
turned into work by :func:`cascade.traces.opshapes.op_work`, exactly as a ``record_shapes=True``
trace's ops are; a convolution backward gives its two passes (data and weight gradient) a row
each. It has shapes, FLOPs and bytes, no durations and no kernel names: what a trace's kernels
would be predicted from where no measured time is there to scale.

The bench predicts that step on each GPU (the ``analytical`` model: the calibrated work model,
FP32 convolutions as PyTorch's cuDNN runs them there) and prints it beside issue 28's measured
totals of the real traces of the same model and batch (A100 SXM4 40GB 39.44 ms, a V100 94.5 ms,
its board not stated): a check of the physics a whole network meets (TF32 convolutions on
Ampere, memory-bound norms and activations), not a fit (nothing is calibrated on them).

``cascade bench resnet50 --write`` rewrites the table; it needs PyTorch (its CPU build will do).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from cascade.kerneltable import KernelTable
from programs.bench._capture import Call, recording, table_of, write_gz

NAME = "resnet50"
HELP = "a FP32 ResNet-50 training step predicted from its work alone, beside measured totals"

TABLE = Path(__file__).with_name("data") / "resnet50-train-fp32-b32.kernels.csv.gz"
BATCH = 32
#: Issue 28's measured step totals (sum of the step's kernels, PyTorch profiler traces): GPU ->
#: ms. The V100's board is not stated: both boards are printed against it.
MEASURED_MS: dict[str, float] = {"SM80_A100_SXM_40GB": 39.44, "SM70_V100_SXM2": 94.5, "SM70_V100_PCIE_32GB": 94.5}
TARGETS: tuple[str, ...] = ("SM70_V100_SXM2", "SM70_V100_PCIE_32GB", "SM80_A100_SXM_40GB", "SM86_A10",
                            "SM89_L40S", "SM90_H100", "SM75_T4")

# ---- writing the table (needs PyTorch) ------------------------------------------------------------
def capture(batch: int = BATCH) -> list[Call]:
    """One training step's aten calls as profiler records (name, dims, types, concrete)."""
    import torch
    from torch import nn

    class Bottleneck(nn.Module):
        def __init__(self, cin: int, width: int, stride: int) -> None:
            super().__init__()
            out = 4 * width
            self.conv1, self.bn1 = nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width)
            self.conv2, self.bn2 = nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width)
            self.conv3, self.bn3 = nn.Conv2d(width, out, 1, bias=False), nn.BatchNorm2d(out)
            self.relu = nn.ReLU(inplace=True)
            self.down = (nn.Sequential(nn.Conv2d(cin, out, 1, stride, bias=False), nn.BatchNorm2d(out))
                         if stride != 1 or cin != out else None)

        def forward(self, x: Any) -> Any:
            idt = x if self.down is None else self.down(x)
            y = self.relu(self.bn1(self.conv1(x)))
            y = self.relu(self.bn2(self.conv2(y)))
            return self.relu(self.bn3(self.conv3(y)) + idt)

    class ResNet50(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64),
                                      nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1))
            blocks: list[nn.Module] = []
            cin = 64
            for width, count, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
                for j in range(count):
                    blocks.append(Bottleneck(cin, width, stride if j == 0 else 1))
                    cin = 4 * width
            self.blocks = nn.Sequential(*blocks)
            self.fc = nn.Linear(2048, 1000)

        def forward(self, x: Any) -> Any:
            y = nn.functional.adaptive_avg_pool2d(self.blocks(self.stem(x)), 1)
            return self.fc(torch.flatten(y, 1))

    torch.manual_seed(0)
    model = ResNet50().to("meta")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, foreach=True)
    x = torch.empty(batch, 3, 224, 224, device="meta")
    y = torch.empty(batch, dtype=torch.long, device="meta")
    def step() -> None:
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()  # the first step creates the momentum buffers; the second is recorded
    with recording() as calls:
        step()
    return calls


def write(path: Path = TABLE, batch: int = BATCH) -> KernelTable:
    """Capture the step and write its table."""
    table = table_of(capture(batch))
    write_gz(table, path)
    return table


# ---- the bench -------------------------------------------------------------------------------------
def load(path: Path = TABLE) -> KernelTable:
    from cascade.tableio import read_table

    return read_table(path)


def step_ms(table: KernelTable, targets: tuple[str, ...] = TARGETS) -> dict[str, dict[str, float]]:
    """Per target: the predicted step (``all``) and each op family's share, ms."""
    from cascade import opfamilies as ops
    from cascade.engine import predict_many

    preds = predict_many(table, list(targets), model="analytical")
    fam = np.asarray(ops.FAMILIES, dtype=object)[ops.families(table["op"], table["name"])]
    out: dict[str, dict[str, float]] = {}
    for p in preds:
        by = out.setdefault(p.target, {"all": float(p.predicted_ns.sum() / 1e6)})
        for f in sorted(set(fam.tolist())):
            by[str(f)] = float(p.predicted_ns[fam == f].sum() / 1e6)
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--table", type=Path, default=TABLE, help="the step's kernel table")
    parser.add_argument("--targets", default=",".join(TARGETS), help="GPUs, comma-separated")
    parser.add_argument("--write", action="store_true",
                        help="capture the step on PyTorch's meta device (needs PyTorch) and rewrite the table")


def run(args: argparse.Namespace) -> int:
    """Print the predicted step per GPU beside the measured totals (``--write``: rewrite the
    table first)."""
    if args.write:
        written = write(args.table)
        print(f"wrote {args.table} ({len(written)} rows)")
    table = load(args.table)
    targets = tuple(t.strip() for t in args.targets.split(",") if t.strip())
    res = step_ms(table, targets)
    gflop = float(np.nansum(table["flops"])) / 1e9
    print(f"FP32 ResNet-50 training step, batch {BATCH}, from its work alone ({len(table)} ops, "
          f"{gflop:.0f} GFLOP): predicted ms")
    fams = sorted({f for r in res.values() for f in r if f != "all"})
    print(f"{'GPU':<22} {'step':>8} {'measured':>9} {'error':>7}  " + "  ".join(f"{f:>11}" for f in fams))
    for tid in targets:
        r = res[tid]
        meas = MEASURED_MS.get(tid)
        err = f"{(r['all'] / meas - 1) * 100:+6.1f}%" if meas else ""
        print(f"{tid:<22} {r['all']:8.1f} {meas if meas else '':>9} {err:>7}  "
              + "  ".join(f"{r.get(f, 0.0):11.2f}" for f in fams))
    v, a = "SM70_V100_SXM2", "SM80_A100_SXM_40GB"
    if v in res and a in res:
        print(f"\nV100 SXM2 / A100 SXM4 40GB: {res[v]['all'] / res[a]['all']:.2f}x predicted, "
              f"{MEASURED_MS[v] / MEASURED_MS[a]:.2f}x measured (issue 28's real traces)")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m programs.bench.resnet50", description=__doc__.split("\n\n")[0])
    add_arguments(ap)
    return run(ap.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
