"""Bundled sample runs (``samples/<name>/``): loading and validation.

A sample folder holds a recorded reference run (``reference/results.json``,
read-only, badge "Sample") and a runnable synthetic replica
(``synthetic/timeline.csv`` + ``synthetic/manifest.json``, labelled
"synthetic"). This module only reads files when a function is called; the
app decides when to load a sample into its state and uses the stable ids
defined here, so reloading is idempotent.
"""

from __future__ import annotations

import gzip
import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from cascade.errors import ConflictError, NotFoundError, TraceFormatError, ValidationError
from cascade.kerneltable import KernelTable
from cascade.runs.summary import RecordedReference, ReferenceRow
from cascade.tableio import read_table

#: The repository's ``samples/`` folder (shared/cascade/platform/samples.py -> parents[3] / "samples").
SAMPLES_DIR: Path = Path(__file__).resolve().parents[3] / "samples"

#: The first (and default) bundled sample.
DEFAULT_SAMPLE = "opt125m-h100-e2e"

REFERENCE_FILE = "reference/results.json"
SYNTHETIC_TIMELINE_FILE = "synthetic/timeline.csv.gz"
SYNTHETIC_MANIFEST_FILE = "synthetic/manifest.json"

#: Badge shown on the recorded (read-only) reference run and trace.
RECORDED_BADGE = "Sample"
#: Label shown on the runnable synthetic replica.
SYNTHETIC_LABEL = "synthetic"

#: Relative agreement allowed between a recorded error_pct and (sim - real) / real (2-decimal rounding).
_ERROR_PCT_TOLERANCE = 0.006

NonNegative = Annotated[float, msgspec.Meta(ge=0)]


class SampleWorkload(msgspec.Struct, frozen=True, kw_only=True):
    """What the recorded run executed."""

    model: str
    """Model id, e.g. ``facebook/opt-125m``."""
    mode: str
    """Execution mode, e.g. ``eager``."""
    prompt: str
    """Prompt text."""
    new_tokens: Annotated[int, msgspec.Meta(ge=1)]
    """Tokens generated per repeat."""
    repeats: Annotated[int, msgspec.Meta(ge=1)]
    """Repeats run, warm-up included."""
    warmup_repeats: Annotated[int, msgspec.Meta(ge=0)]
    """Repeats discarded as warm-up."""
    description: str = ""
    """One-line human description."""


class SampleTraceInfo(msgspec.Struct, frozen=True, kw_only=True):
    """Where the recorded run's trace came from."""

    source_hardware: str
    """GPU the trace was captured on (e.g. ``H100``)."""
    source_config: str
    """Cascade / Accel-Sim config id of the source GPU (e.g. ``SM90_H100``)."""
    tracer: str
    """Tool that captured the instruction traces."""
    instruction_traces_mb: NonNegative
    """Size of the instruction traces, MB."""
    instruction_traces_bundled: bool
    """Whether the instruction traces ship with Cascade (they do not: the run cannot be rerun)."""


class SampleConfigResult(msgspec.Struct, frozen=True, kw_only=True):
    """One hardware / configuration row of the recorded results."""

    hardware: str
    """Marketing name of the GPU (``H100``)."""
    config: str
    """GPU spec id the simulation used (``SM90_H100``)."""
    simulated_mean_e2e_ms: NonNegative
    """Simulated mean end-to-end latency, ms."""
    real_mean_e2e_ms: NonNegative | None = None
    """Measured (unprofiled) mean end-to-end latency, ms; None when never measured."""
    error_pct: float | None = None
    """(simulated - real) / real in percent, as recorded; None without a real baseline."""
    counterfactual: bool = False
    """True when no measured baseline exists (another GPU's traces replayed)."""
    native_trace: bool = False
    """True when this hardware had its own trace."""
    real_baseline: bool = False
    """True when a real unprofiled baseline was measured."""
    note: str = ""
    """Human note shown beside the row."""

    def computed_error_pct(self) -> float | None:
        """(simulated - real) / real x 100 from the recorded figures (None without a baseline)."""
        if self.real_mean_e2e_ms is None or self.real_mean_e2e_ms == 0:
            return None
        return (self.simulated_mean_e2e_ms - self.real_mean_e2e_ms) / self.real_mean_e2e_ms * 100.0


class SampleCalibration(msgspec.Struct, frozen=True, kw_only=True):
    """The request model's calibration range of the recorded run."""

    prefill_tokens: Annotated[int, msgspec.Meta(ge=1)]
    """Prompt tokens of the (only) prefill step."""
    decode_context_min: Annotated[int, msgspec.Meta(ge=1)]
    """Smallest decode context covered."""
    decode_context_max: Annotated[int, msgspec.Meta(ge=1)]
    """Largest decode context covered."""
    note: str = ""
    """Human explanation."""


class SampleReference(msgspec.Struct, frozen=True, kw_only=True):
    """A recorded reference run: ``samples/<name>/reference/results.json``."""

    schema_version: Literal[1]
    """File format version."""
    name: str
    """Sample name (the folder name)."""
    title: str
    """Human title."""
    badge: str
    """Badge the UI shows ("Sample")."""
    provenance: Literal["recorded"]
    """Always "recorded" for a reference run."""
    read_only: bool
    """True: the app never modifies it."""
    rerunnable: bool
    """False when the inputs needed to rerun are not bundled."""
    rerun_refusal: str
    """Message of the 409 a rerun request gets."""
    workload: SampleWorkload
    """What ran."""
    trace: SampleTraceInfo
    """How it was traced."""
    simulator: str
    """Simulator that produced the simulated figures."""
    kernel_model: str
    """Cascade kernel-model name equivalent (``accel-sim``)."""
    results: list[SampleConfigResult]
    """One row per hardware / configuration."""
    calibration: SampleCalibration
    """Request-model calibration range."""
    caveats: list[str] = []
    """Caveats shown with the figures."""

    def result(self, config: str) -> SampleConfigResult:
        """The row of one GPU config (NotFoundError naming the known ones)."""
        for row in self.results:
            if row.config == config:
                return row
        known = ", ".join(r.config for r in self.results)
        raise NotFoundError(f"sample {self.name!r} has no result for config {config!r}; known: {known}")


class SyntheticManifest(msgspec.Struct, frozen=True, kw_only=True):
    """Provenance of a synthetic replica: ``samples/<name>/synthetic/manifest.json``."""

    schema_version: Literal[1]
    """File format version."""
    provenance: Literal["synthetic"]
    """Always "synthetic"."""
    label: str
    """Label the UI shows ("synthetic")."""
    sample: str
    """Sample name."""
    description: str
    """What it is."""
    generator: str
    """Repository path of the script that wrote it."""
    timeline: str
    """File name of the timeline CSV beside the manifest."""
    timeline_sha256: str
    """SHA-256 of the timeline CSV bytes."""
    source_gpu: str
    """GPU config the durations are estimated for."""
    workload: dict[str, Any]
    """Model and generation parameters."""
    steps: dict[str, Any]
    """How steps map to prefill / decode and contexts."""
    assumptions: dict[str, Any]
    """Every constant the generator assumed."""
    derived: dict[str, Any]
    """Figures derived from the timeline (not measurements)."""


class SampleInfo(msgspec.Struct, frozen=True, kw_only=True):
    """What the app needs to list a sample, with the stable ids it registers it under."""

    name: str
    """Sample (folder) name."""
    title: str
    """Human title."""
    path: str
    """Absolute folder path."""
    recorded_trace_id: str
    """Trace id of the recorded, read-only trace (``sample-<name>``)."""
    synthetic_trace_id: str
    """Trace id of the runnable synthetic replica (``sample-<name>-synthetic``)."""
    recorded_run_id: str
    """Run id of the recorded reference run (``sample-<name>``)."""
    synthetic_run_id: str = ""
    """Run id of the synthetic replica's finished run, simulated at first start
    (``sample-<name>-synthetic-run``)."""
    badge: str = RECORDED_BADGE
    """Badge of the recorded run and trace."""
    synthetic_label: str = SYNTHETIC_LABEL
    """Label of the synthetic replica."""
    has_reference: bool = True
    """Whether ``reference/results.json`` exists."""
    has_synthetic: bool = True
    """Whether ``synthetic/timeline.csv`` exists."""


@dataclass(frozen=True)
class Sample:
    """A loaded sample: parsed reference, synthetic timeline and its manifest."""

    info: SampleInfo
    reference: SampleReference
    synthetic_table: KernelTable
    synthetic_manifest: SyntheticManifest

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def recorded_trace_id(self) -> str:
        return self.info.recorded_trace_id

    @property
    def synthetic_trace_id(self) -> str:
        return self.info.synthetic_trace_id

    @property
    def recorded_run_id(self) -> str:
        return self.info.recorded_run_id

    @property
    def synthetic_run_id(self) -> str:
        return self.info.synthetic_run_id


def recorded_trace_id(name: str) -> str:
    """Stable trace id of a sample's recorded (read-only) trace."""
    return f"sample-{name}"


def synthetic_trace_id(name: str) -> str:
    """Stable trace id of a sample's runnable synthetic replica."""
    return f"sample-{name}-synthetic"


def synthetic_run_id(name: str) -> str:
    """Stable run id of the synthetic replica's run that the app simulates at first start."""
    return f"sample-{name}-synthetic-run"


def recorded_run_id(name: str) -> str:
    """Stable run id of a sample's recorded reference run."""
    return f"sample-{name}"


#: Stable ids of the default sample, for the api and tests.
RECORDED_TRACE_ID = recorded_trace_id(DEFAULT_SAMPLE)
SYNTHETIC_TRACE_ID = synthetic_trace_id(DEFAULT_SAMPLE)
RECORDED_RUN_ID = recorded_run_id(DEFAULT_SAMPLE)
SYNTHETIC_RUN_ID = synthetic_run_id(DEFAULT_SAMPLE)


def samples_dir(override: str | Path | None = None) -> Path:
    """The samples folder: ``override`` when given, else the repository's ``samples/``."""
    return Path(override).resolve() if override is not None else SAMPLES_DIR


def _sample_path(name: str, root: Path) -> Path:
    if not name or "/" in name or "\\" in name or name.startswith("."):
        raise ValidationError(f"not a sample name: {name!r}", field="sample")
    path = root / name
    if not path.is_dir():
        known = ", ".join(s.name for s in list_samples(root)) or "none"
        raise NotFoundError(f"no sample {name!r} under {root}; known: {known}")
    return path


def _decode(path: Path, typ: type[Any]) -> Any:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise TraceFormatError(str(path), None, f"a {typ.__name__} JSON file", "missing file") from None
    try:
        return msgspec.json.decode(data, type=typ)
    except msgspec.ValidationError as exc:
        raise TraceFormatError(str(path), None, f"a valid {typ.__name__}", str(exc)) from None
    except msgspec.DecodeError as exc:
        raise TraceFormatError(str(path), None, "JSON", str(exc)) from None


def validate_reference(ref: SampleReference, *, file: str, name: str) -> None:
    """Cross-field checks of a reference: name, error percentages, counterfactual rows, calibration."""
    if ref.name != name:
        raise TraceFormatError(file, None, f"name {name!r} (the folder name)", ref.name)
    if not ref.results:
        raise TraceFormatError(file, None, "at least one entry in results", "[]")
    seen: set[str] = set()
    for i, row in enumerate(ref.results):
        where = f"results[{i}] ({row.config})"
        if row.config in seen:
            raise TraceFormatError(file, None, f"{where}: one row per config", "duplicate")
        seen.add(row.config)
        computed = row.computed_error_pct()
        if row.counterfactual:
            if row.real_mean_e2e_ms is not None or row.error_pct is not None:
                raise TraceFormatError(
                    file, None, f"{where}: no real_mean_e2e_ms / error_pct on a counterfactual row",
                    f"real={row.real_mean_e2e_ms}, error={row.error_pct}")
            continue
        if computed is None or row.error_pct is None:
            raise TraceFormatError(file, None, f"{where}: real_mean_e2e_ms and error_pct (or counterfactual)",
                                   f"real={row.real_mean_e2e_ms}, error={row.error_pct}")
        if not math.isclose(computed, row.error_pct, abs_tol=_ERROR_PCT_TOLERANCE):
            raise TraceFormatError(
                file, None, f"{where}: error_pct = (simulated - real) / real = {computed:+.4f}%",
                f"{row.error_pct:+.2f}%")
    cal = ref.calibration
    if cal.decode_context_min > cal.decode_context_max:
        raise TraceFormatError(file, None, "calibration.decode_context_min <= decode_context_max",
                               f"{cal.decode_context_min} > {cal.decode_context_max}")


def _info(name: str, path: Path, title: str = "") -> SampleInfo:
    return SampleInfo(
        name=name, title=title or name, path=str(path),
        recorded_trace_id=recorded_trace_id(name), synthetic_trace_id=synthetic_trace_id(name),
        recorded_run_id=recorded_run_id(name), synthetic_run_id=synthetic_run_id(name),
        has_reference=(path / REFERENCE_FILE).is_file(),
        has_synthetic=(path / SYNTHETIC_TIMELINE_FILE).is_file(),
    )


def load_reference(name: str = DEFAULT_SAMPLE, *, root: str | Path | None = None) -> SampleReference:
    """Parse and validate ``samples/<name>/reference/results.json``."""
    path = _sample_path(name, samples_dir(root)) / REFERENCE_FILE
    ref: SampleReference = _decode(path, SampleReference)
    validate_reference(ref, file=str(path), name=name)
    return ref


def load_sample(name: str = DEFAULT_SAMPLE, *, root: str | Path | None = None) -> Sample:
    """Load a bundled sample: its validated reference, synthetic timeline and manifest.

    ``root`` overrides the samples folder. Errors name the file and what was
    expected (TraceFormatError), or the known samples (NotFoundError).
    """
    base = samples_dir(root)
    folder = _sample_path(name, base)
    reference = load_reference(name, root=base)
    manifest_path = folder / SYNTHETIC_MANIFEST_FILE
    manifest: SyntheticManifest = _decode(manifest_path, SyntheticManifest)
    if manifest.sample != name:
        raise TraceFormatError(str(manifest_path), None, f"sample {name!r}", manifest.sample)
    csv_path = folder / "synthetic" / manifest.timeline
    if not csv_path.is_file():
        raise TraceFormatError(str(csv_path), None, "the synthetic timeline CSV", "missing file")
    csv_bytes = gzip.decompress(csv_path.read_bytes()) if csv_path.suffix == ".gz" else csv_path.read_bytes()
    digest = hashlib.sha256(csv_bytes).hexdigest()
    if digest != manifest.timeline_sha256:
        raise TraceFormatError(str(csv_path), None,
                               f"sha256 {manifest.timeline_sha256} (from {manifest_path.name}); "
                               "regenerate with the sample's generate_timeline.py", digest)
    table = read_table(csv_path)  # handles .gz
    if len(table) == 0:
        raise TraceFormatError(str(csv_path), 2, "at least one kernel row", "no rows")
    return Sample(
        info=_info(name, folder, reference.title),
        reference=reference,
        synthetic_table=table,
        synthetic_manifest=manifest,
    )


def list_samples(root: str | Path | None = None) -> list[SampleInfo]:
    """Every sample folder (one with a reference or a synthetic replica), sorted by name."""
    base = samples_dir(root)
    if not base.is_dir():
        return []
    out: list[SampleInfo] = []
    for path in sorted(p for p in base.iterdir() if p.is_dir() and not p.name.startswith(".")):
        info = _info(path.name, path)
        if not (info.has_reference or info.has_synthetic):
            continue
        if info.has_reference:
            try:
                title = msgspec.json.decode((path / REFERENCE_FILE).read_bytes(), type=dict[str, Any]).get(
                    "title", "")
            except msgspec.DecodeError:
                title = ""
            info = msgspec.structs.replace(info, title=str(title) or path.name)
        out.append(info)
    return out


def is_recorded_run(run_id: str, root: str | Path | None = None) -> bool:
    """True if ``run_id`` is the recorded reference run of a bundled sample."""
    return any(s.recorded_run_id == run_id and s.has_reference for s in list_samples(root))


def refuse_rerun(run_id: str, root: str | Path | None = None) -> None:
    """Raise ConflictError (HTTP 409) if ``run_id`` is a recorded sample run; otherwise return."""
    for info in list_samples(root):
        if info.recorded_run_id == run_id and info.has_reference:
            ref = load_reference(info.name, root=root)
            if not ref.rerunnable:
                raise ConflictError(ref.rerun_refusal, state="recorded")


def recorded_reference(run_id: str, root: str | Path | None = None) -> RecordedReference | None:
    """The published figures of the sample whose recorded reference run is ``run_id`` (None for
    any other run)."""
    info = next((s for s in list_samples(root) if s.recorded_run_id == run_id and s.has_reference), None)
    if info is None:
        return None
    ref = load_reference(info.name, root=root)
    return RecordedReference(
        badge=ref.badge, title=ref.title, simulator=ref.simulator, kernel_model=ref.kernel_model,
        caveats=ref.caveats,
        configs=[ReferenceRow(config=r.config, hardware=r.hardware, real_e2e_ms=r.real_mean_e2e_ms,
                              simulated_e2e_ms=r.simulated_mean_e2e_ms, error_pct=r.error_pct,
                              counterfactual=r.counterfactual, note=r.note)
                 for r in ref.results])
