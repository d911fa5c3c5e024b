"""`cascade predict --trace FILE --source SPEC --target SPEC[,SPEC...]`: per-kernel predictions.

Kernel tables (CSV, gzip CSV, Parquet) stream through in batches, so a table larger
than memory is predicted with bounded memory; the output (CSV on stdout or ``--out``,
Parquet when ``--out`` ends in ``.parquet``) keeps the input's row order, target by target.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

    from cascade.engine.predict import PredictionProvenance

#: Output columns added after the input's own.
PREDICTION_COLUMNS = ("target", "predicted_ns", "regime", "model")


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser("predict", help="predict a traced kernel table on other GPUs")
    p.add_argument("--trace", required=True, metavar="FILE",
                   help="kernel table (.csv, .csv.gz, .parquet) or a loader-supported input")
    p.add_argument("--source", metavar="SPEC",
                   help="GPU the trace was captured on (id or device name; default: the GPU the "
                        "trace names)")
    p.add_argument("--force-source", action="store_true",
                   help="use --source even where the trace names another GPU")
    p.add_argument("--target", required=True, metavar="SPEC[,SPEC...]", help="target GPU(s)")
    p.add_argument("--model", default="auto", help="kernel model (auto, scaled, analytical, roofline, accel-sim)")
    p.add_argument("--measurement", default="kernel",
                   help="how duration_ns was measured: kernel (default) or a harness name (neusight)")
    p.add_argument("--calibration", metavar="FILE", help="calibration JSON (default: packaged)")
    p.add_argument("--no-residuals", action="store_true",
                   help="scaled: leave out the calibration's per-target GEMM shape-residual grids")
    p.add_argument("--specs", metavar="DIR", help="also load user GPU spec files from DIR")
    p.add_argument("--out", metavar="FILE",
                   help="write here instead of stdout: .csv, .csv.gz or .parquet")
    p.add_argument("--batch-rows", type=int, default=None, metavar="N",
                   help="rows predicted at a time (default 250,000: bounded memory)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Predict and write input columns + target,predicted_ns,regime,model (JSON traces read
    under the ``CASCADE_TRACE_JSON_*`` limits)."""
    from cascade.platform.settings import load_settings
    from cascade.traces.jsonstream import JsonLimits, use_limits

    with use_limits(JsonLimits.from_settings(load_settings())):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    import tempfile

    from cascade import tableio
    from cascade.calibration import load_calibration
    from cascade.engine.predict import PredictionTotals, predict_many
    from cascade.errors import ValidationError
    from cascade.gpus import GPURegistry, builtin_specs
    from cascade.traces.inputs import source_of_trace, stream_trace

    reg = GPURegistry(builtin_specs())
    if args.specs:
        reg.load_dir(args.specs)
    targets = [reg.get(t.strip()) for t in args.target.split(",") if t.strip()]
    if not targets:
        raise ValidationError("give at least one target GPU", field="target")
    if args.out:
        tableio.table_format(args.out)  # refuse an unknown output format before any work
    batch_rows = args.batch_rows or tableio.BATCH_ROWS
    if batch_rows < 1:
        raise ValidationError("must be at least 1", field="batch-rows")
    streamed = stream_trace(args.trace, batch_rows)
    source = source_of_trace(reg, args.source, streamed, override=args.force_source)
    for warning in streamed.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if args.model == "scaled" and source is None:
        raise ValidationError("--model scaled needs --source", field="source")
    if args.model == "auto" and source is None:
        print(f"warning: {args.trace} names no GPU and no --source was given: its measured kernel "
              "times are not used (each kernel is predicted from its work alone, at the looser accuracy "
              "measured for that); give --source SPEC, the GPU it was captured on", file=sys.stderr)
    config = _model_config(args)
    cal = load_calibration(args.calibration) if args.calibration else load_calibration()
    simulated = _simulate_targets(args, reg, targets) if args.model == "accel-sim" else None

    totals: list[PredictionTotals] = []
    with tempfile.TemporaryDirectory(prefix="cascade-predict-") as tmp:
        # The first target's rows go straight to the output; the others wait in Arrow IPC
        # files (exact, fast) and follow in target order once every batch is predicted.
        final = tableio.TableWriter(args.out if args.out else _stdout_bytes(), None if args.out
                                    else "csv")
        later = [_IpcSpool(Path(tmp) / f"target-{i}.arrow") for i in range(1, len(targets))]
        try:
            for batch in streamed.batches:
                if simulated is None:
                    preds = predict_many(batch.table, targets, source=source, model=args.model,
                                         calibration=cal, config=config, registry=reg)
                else:  # one Accel-Sim run per target: each its own cycles
                    preds = [predict_many(batch.table, [t], source=source, calibration=cal,
                                          registry=reg, **_accelsim_model(simulated.get(t.id)))[0]
                             for t in targets]
                inputs = batch.arrow
                for i, pred in enumerate(preds):
                    if len(totals) <= i:
                        totals.append(PredictionTotals(first=pred))
                    totals[i].add(pred)
                    out = _with_predictions(inputs, pred)
                    if simulated is not None:
                        out = _with_cycles(out, batch.table, simulated.get(targets[i].id))
                    if i == 0:
                        final.write(out)
                    else:
                        later[i - 1].write(out)
            for spool in later:
                for chunk in spool.read():
                    final.write(chunk)
        except BaseException:
            final.close()
            if args.out:  # never leave half a table behind under the name asked for
                Path(args.out).unlink(missing_ok=True)
            raise
        finally:
            for spool in later:
                spool.close()
            final.close()
    if args.out:
        done = ", ".join(f"{t.first.target}: {t.total_ns / 1e6:.3f} ms" for t in totals)
        print(f"wrote {final.rows} rows to {Path(args.out)} (sum of kernels {done})")
    for t in totals:
        flags = t.all_flags
        reasons = _reasons(flags)
        extrapolated = 0 if flags is None else int((flags != 0).sum())
        print(provenance_line(t.provenance(cal), t.kernels, extrapolated, reasons), file=sys.stderr)
    return 0


def _simulate_targets(args: argparse.Namespace, reg: Any, targets: list[Any]) -> dict[str, Any]:
    """``--model accel-sim``: run Accel-Sim on the trace folder's kernels once per target that has
    a config here (CASCADE_ACCELSIM_BIN, CASCADE_ACCELSIM_CONFIGS); the AccelSimConfig per target
    id. Targets without a config are predicted by the built-in ``auto`` model, said on stderr."""
    from cascade.errors import ValidationError
    from cascade.platform.accelsim import discover_from, require, simulate
    from cascade.platform.settings import load_settings

    trace = Path(args.trace)
    if not (trace.is_dir() and (trace / "kernelslist.g").is_file()):
        raise ValidationError(
            f"{trace} is not an Accel-Sim trace folder: --model accel-sim simulates the kernels of "
            "a folder holding kernelslist.g and kernel-N.traceg (Accel-Sim's tracer output after "
            "post-traces-processing)", field="trace")
    settings = load_settings()

    def resolve(name: str) -> str | None:
        spec = reg.resolve(name)
        return spec.id if spec is not None else None

    setup = discover_from(settings, resolve=resolve, specs=list(reg))
    runnable = [t for t in targets if setup.can_run(t.id)]
    if not runnable:
        require(setup, [t.id for t in targets])
    out: dict[str, Any] = {}
    for t in targets:
        if t not in runnable:
            print(f"warning: {t.id}: {setup.serving(t.id).reason}; predicted by the auto model instead",
                  file=sys.stderr)
            continue
        gpu = setup.configs[t.id]
        cfg = simulate(setup.binary, str(trace), gpu, timeout_s=settings.sim_timeout_s)
        out[t.id] = cfg
        total = sum(cfg.simulated_cycles.values())
        clock = cfg.core_clock_mhz
        beside = (f"; the spec's boost clock is {t.boost_clock_mhz:g} MHz (not used: the cycles are "
                  f"{gpu.name}'s)" if abs(clock - t.boost_clock_mhz) >= 0.5 else "")
        print(f"{t.id}: Accel-Sim {gpu.name} ({gpu.relation}): {len(cfg.simulated_cycles)} kernels, "
              f"{total:,} cycles at {clock:g} MHz = {total / clock:,.2f} us{beside}", file=sys.stderr)
    return out


def _accelsim_model(cfg: Any) -> dict[str, Any]:
    return {"model": "accel-sim", "config": cfg} if cfg is not None else {"model": "auto"}


def _with_cycles(out: pa.Table, table: Any, cfg: Any) -> pa.Table:
    """A ``sim_cycles`` column: Accel-Sim's cycles per row, by kernel id (null where it did not
    simulate the kernel or the target had no config)."""
    import numpy as np
    import pyarrow as pa

    n = out.num_rows
    cycles: list[int | None] = [None] * n
    if cfg is not None:
        ids = np.asarray(table["kernel_id"], dtype=np.int64) if "kernel_id" in table else np.zeros(n)
        if not np.any(ids > 0):
            ids = np.arange(1, n + 1)
        got = cfg.simulated_cycles
        cycles = [got.get(str(int(k))) for k in ids.tolist()]
    return out.append_column("sim_cycles", pa.array(cycles, type=pa.int64()))


def _model_config(args: argparse.Namespace) -> object:
    from cascade.engine.analytical import AnalyticalConfig
    from cascade.engine.models import AutoConfig, ScaledConfig

    scaled = ScaledConfig(measurement=args.measurement, residuals=not args.no_residuals)
    if args.model == "scaled":
        return scaled
    if args.model == "auto":
        return AutoConfig(scaled=scaled)
    if args.model == "analytical":
        return AnalyticalConfig(measurement=args.measurement)
    return None


def _stdout_bytes() -> Any:
    sys.stdout.flush()
    return getattr(sys.stdout, "buffer", None) or _TextSink(sys.stdout)


class _TextSink:
    """A bytes sink over a text stream without ``.buffer`` (an embedding host's stdout)."""

    def __init__(self, out: Any) -> None:
        self._out = out

    def write(self, data: bytes) -> int:
        self._out.write(bytes(data).decode())
        return len(data)

    def flush(self) -> None:
        self._out.flush()

    @property
    def closed(self) -> bool:
        return False


def _with_predictions(inputs: pa.Table, pred: Any) -> pa.Table:
    import numpy as np
    import pyarrow as pa

    from cascade.engine.perf import REGIMES

    n = inputs.num_rows
    regime = pa.DictionaryArray.from_arrays(pa.array(pred.regime.astype(np.int32)),
                                            pa.array(list(REGIMES))).cast(pa.string())
    return (inputs
            .append_column("target", pa.array([pred.target] * n, type=pa.string()))
            .append_column("predicted_ns", pa.array(np.round(pred.predicted_ns, 1)))
            .append_column("regime", regime)
            .append_column("model", pa.array(pred.models, type=pa.string())))


class _IpcSpool:
    """Arrow tables kept on disk in order (one target's rows until their turn)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._writer: Any = None

    def write(self, table: pa.Table) -> None:
        import pyarrow as pa

        if self._writer is None:
            self._writer = pa.ipc.new_stream(str(self.path), table.schema)
        self._writer.write_table(table)

    def read(self) -> Iterator[pa.Table]:
        import pyarrow as pa

        if self._writer is None:
            return
        self._writer.close()
        self._writer = None
        with pa.ipc.open_stream(str(self.path)) as reader:
            for batch in reader:
                yield pa.Table.from_batches([batch])

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def _reasons(flags: Any) -> dict[str, int]:
    from cascade.engine.extrapolation import describe_flags

    return {} if flags is None else describe_flags(flags)


def provenance_line(pv: PredictionProvenance, kernels: int, extrapolated: int,
                    reasons: dict[str, int]) -> str:
    """What produced a target's predictions and how far to trust them (for stderr)."""
    from cascade.calibration.accuracy import describe

    src = f" from {pv.source_id}" if pv.source_id else ""
    extra = (f"; {extrapolated}/{kernels} kernels extrapolated ("
             + ", ".join(f"{n}: {text}" for text, n in reasons.items()) + ")") if reasons else ""
    return (f"{pv.spec_id}{src}: model {pv.model}, spec {pv.spec_hash}, calibration "
            f"{pv.calibration_id}@{pv.calibration_version} ({pv.calibration_digest}), "
            f"{pv.measurement} times; {describe(pv.accuracy)}{extra}")
