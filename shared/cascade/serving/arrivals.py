"""Arrival patterns and length laws, registered by name.

Generated arrival times start at 0 (the first request is sent at once, as
``vllm bench serve`` does) and follow with inter-arrival gaps; gaps are drawn
as unit-rate variates divided by the rate, so with one seed a higher rate is
the same traffic compressed in time (capacity searches rely on it).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import msgspec
import numpy as np

from cascade.errors import TraceFormatError, ValidationError
from cascade.registry import Registry

PosF = Annotated[float, msgspec.Meta(gt=0)]
PosI = Annotated[int, msgspec.Meta(ge=1)]
#: Longest prompt or output a length law may give (tokens): far past any model's context.
MAX_TOKENS = 2**20
Tokens = Annotated[int, msgspec.Meta(ge=1, le=MAX_TOKENS)]
TokensF = Annotated[float, msgspec.Meta(gt=0, le=MAX_TOKENS)]


# ---- arrival configs ---------------------------------------------------------------------------

class Poisson(msgspec.Struct, frozen=True, kw_only=True, tag="poisson", tag_field="kind"):
    """Exponential inter-arrival gaps."""

    rate: PosF
    """Requests per second."""


class Gamma(msgspec.Struct, frozen=True, kw_only=True, tag="gamma", tag_field="kind"):
    """Gamma inter-arrival gaps: cv > 1 is burstier than Poisson, cv < 1 smoother."""

    rate: PosF
    cv: PosF = 1.0
    """Coefficient of variation of the gaps (vllm bench's burstiness = 1 / cv^2)."""


class Constant(msgspec.Struct, frozen=True, kw_only=True, tag="constant", tag_field="kind"):
    """Evenly spaced requests."""

    rate: PosF


class Burst(msgspec.Struct, frozen=True, kw_only=True, tag="burst", tag_field="kind"):
    """Every request arrives at t = 0 (needs n_requests)."""


class Trace(msgspec.Struct, frozen=True, kw_only=True, tag="trace", tag_field="kind"):
    """Replay of a CSV with header ``arrived_at,prompt_tokens,output_tokens`` (seconds, tokens)."""

    path: str
    time_scale: PosF = 1.0
    """Arrival times are multiplied by this (0.5 = twice the rate)."""


ArrivalConfig = Poisson | Gamma | Constant | Burst | Trace


@dataclass(frozen=True, slots=True)
class TraceRows:
    arrived_at: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray


def read_trace(path: str | Path) -> TraceRows:
    """Read a request trace CSV; errors name the file, line and what was expected."""
    p = Path(path)
    if not p.is_file():
        raise ValidationError(f"trace file {str(p)!r} does not exist", field="arrival.path")
    want = ["arrived_at", "prompt_tokens", "output_tokens"]
    times: list[float] = []
    prompts: list[int] = []
    outputs: list[int] = []
    with p.open(newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None or [h.strip() for h in header] != want:
            raise TraceFormatError(str(p), 1, "header 'arrived_at,prompt_tokens,output_tokens'",
                                   ",".join(header or []))
        for lineno, row in enumerate(reader, start=2):
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) != 3:
                raise TraceFormatError(str(p), lineno, "3 comma-separated fields", ",".join(row))
            try:
                t = float(row[0])
                pr = int(row[1])
                out = int(row[2])
            except ValueError:
                raise TraceFormatError(str(p), lineno,
                                       "a number and two integers", ",".join(row)) from None
            if not math.isfinite(t) or t < 0:
                raise TraceFormatError(str(p), lineno, "arrived_at >= 0 seconds", row[0])
            if pr < 1 or out < 1:
                raise TraceFormatError(str(p), lineno, "prompt_tokens and output_tokens >= 1",
                                       ",".join(row))
            if times and t < times[-1]:
                raise TraceFormatError(str(p), lineno,
                                       f"arrived_at in non-decreasing order (>= {times[-1]})", row[0])
            times.append(t)
            prompts.append(pr)
            outputs.append(out)
    if not times:
        raise TraceFormatError(str(p), 2, "at least one request row")
    return TraceRows(np.array(times), np.array(prompts, dtype=np.int64),
                     np.array(outputs, dtype=np.int64))


ArrivalFn = Callable[[msgspec.Struct, "int | None", "float | None", np.random.Generator], np.ndarray]


def _from_gaps(draw: Callable[[int], np.ndarray], rate: float, n: int | None,
               duration_s: float | None) -> np.ndarray:
    if n is not None:
        gaps = draw(max(n - 1, 0)) / rate
        return np.concatenate([[0.0], np.cumsum(gaps)])[:n]
    assert duration_s is not None
    want = int(rate * duration_s * 1.2) + 16
    times = np.concatenate([[0.0], np.cumsum(draw(want) / rate)])
    while times[-1] < duration_s:
        more = times[-1] + np.cumsum(draw(want) / rate)
        times = np.concatenate([times, more])
    return times[times < duration_s]


def _poisson(cfg: Poisson, n: int | None, d: float | None, rng: np.random.Generator) -> np.ndarray:
    return _from_gaps(rng.standard_exponential, cfg.rate, n, d)


def _gamma(cfg: Gamma, n: int | None, d: float | None, rng: np.random.Generator) -> np.ndarray:
    shape = 1.0 / (cfg.cv * cfg.cv)
    return _from_gaps(lambda k: rng.standard_gamma(shape, k) / shape, cfg.rate, n, d)


def _constant(cfg: Constant, n: int | None, d: float | None, rng: np.random.Generator) -> np.ndarray:
    return _from_gaps(lambda k: np.ones(k), cfg.rate, n, d)


def _burst(cfg: Burst, n: int | None, d: float | None, rng: np.random.Generator) -> np.ndarray:
    if n is None:
        raise ValidationError("a burst needs n_requests (duration_s is not enough)",
                              field="n_requests")
    return np.zeros(n)


def _trace(cfg: Trace, n: int | None, d: float | None, rng: np.random.Generator) -> np.ndarray:
    rows = read_trace(cfg.path)
    times = rows.arrived_at * cfg.time_scale
    if n is not None:
        if n > len(times):
            raise ValidationError(f"the trace {cfg.path!r} has {len(times)} requests, fewer than {n}",
                                  field="n_requests")
        return times[:n]
    if d is not None:
        return times[times < d]
    return times


ARRIVALS: Registry[ArrivalFn] = Registry("arrival pattern")
ARRIVALS.register("poisson", Poisson, _poisson)  # type: ignore[arg-type]
ARRIVALS.register("gamma", Gamma, _gamma)  # type: ignore[arg-type]
ARRIVALS.register("constant", Constant, _constant)  # type: ignore[arg-type]
ARRIVALS.register("burst", Burst, _burst)  # type: ignore[arg-type]
ARRIVALS.register("trace", Trace, _trace)  # type: ignore[arg-type]


def with_rate(cfg: msgspec.Struct, rate: float) -> msgspec.Struct:
    """The same pattern at another mean rate (trace replays are time-scaled)."""
    if isinstance(cfg, Poisson | Gamma | Constant):
        return msgspec.structs.replace(cfg, rate=rate)
    if isinstance(cfg, Trace):
        rows = read_trace(cfg.path)
        span = float(rows.arrived_at[-1] - rows.arrived_at[0])
        if span <= 0 or len(rows.arrived_at) < 2:
            raise ValidationError("a trace whose requests all arrive at once has no rate",
                                  field="arrival")
        natural = (len(rows.arrived_at) - 1) / span
        return msgspec.structs.replace(cfg, time_scale=natural / rate)
    raise ValidationError(f"arrival {type(cfg).__name__.lower()!r} has no rate to search",
                          field="arrival")


def rate_of(cfg: msgspec.Struct) -> float | None:
    """Mean request rate of a pattern, when it has one."""
    if isinstance(cfg, Poisson | Gamma | Constant):
        return cfg.rate
    return None


# ---- length laws -------------------------------------------------------------------------------

class Fixed(msgspec.Struct, frozen=True, kw_only=True, tag="fixed", tag_field="kind"):
    tokens: Tokens


class Uniform(msgspec.Struct, frozen=True, kw_only=True, tag="uniform", tag_field="kind"):
    """Integers uniform on [lo, hi] inclusive."""

    lo: Tokens
    hi: Tokens


class LogNormal(msgspec.Struct, frozen=True, kw_only=True, tag="lognormal", tag_field="kind"):
    """Log-normal lengths: give (mean, sigma) or (median, p90); sigma is of log(length)."""

    mean: TokensF | None = None
    sigma: Annotated[float, msgspec.Meta(ge=0, le=20)] | None = None
    median: TokensF | None = None
    p90: TokensF | None = None
    min: Tokens = 1
    max: Tokens | None = None


class FromTrace(msgspec.Struct, frozen=True, kw_only=True, tag="trace", tag_field="kind"):
    """Lengths from the arrival trace's prompt_tokens / output_tokens columns."""


LengthFn = Callable[[msgspec.Struct, int, np.random.Generator], np.ndarray]

_Z90 = 1.2815515655446004


def lognormal_params(cfg: LogNormal, field: str) -> tuple[float, float]:
    """(mu, sigma) of log(length) from either parameterisation."""
    if cfg.median is not None and cfg.p90 is not None and cfg.mean is None and cfg.sigma is None:
        if cfg.p90 < cfg.median:
            raise ValidationError("p90 must be >= median", field=f"{field}.p90")
        mu = math.log(cfg.median)
        return mu, (math.log(cfg.p90) - mu) / _Z90
    if cfg.mean is not None and cfg.sigma is not None and cfg.median is None and cfg.p90 is None:
        return math.log(cfg.mean) - cfg.sigma**2 / 2, cfg.sigma
    raise ValidationError("give either mean and sigma, or median and p90", field=field)


def _fixed(cfg: Fixed, n: int, rng: np.random.Generator) -> np.ndarray:
    return np.full(n, cfg.tokens, dtype=np.int64)


def _uniform(cfg: Uniform, n: int, rng: np.random.Generator) -> np.ndarray:
    return rng.integers(cfg.lo, cfg.hi + 1, size=n, dtype=np.int64)


def _lognormal(cfg: LogNormal, n: int, rng: np.random.Generator) -> np.ndarray:
    mu, sigma = lognormal_params(cfg, "lengths")
    with np.errstate(over="ignore"):
        x = np.exp(mu + sigma * rng.standard_normal(n))
    top = cfg.max if cfg.max is not None else MAX_TOKENS
    return np.rint(np.clip(x, cfg.min, top)).astype(np.int64)


def _from_trace(cfg: FromTrace, n: int, rng: np.random.Generator) -> np.ndarray:
    raise ValidationError("lengths 'trace' need arrival kind 'trace'", field="lengths")


LENGTHS: Registry[LengthFn] = Registry("length law")
LENGTHS.register("fixed", Fixed, _fixed)  # type: ignore[arg-type]
LENGTHS.register("uniform", Uniform, _uniform)  # type: ignore[arg-type]
LENGTHS.register("lognormal", LogNormal, _lognormal)  # type: ignore[arg-type]
LENGTHS.register("trace", FromTrace, _from_trace)  # type: ignore[arg-type]


def parse_length(text: str, field: str) -> msgspec.Struct:
    """CLI form: '128', 'uniform:64:512', 'lognormal:mean=200,sigma=0.5',
    'lognormal:median=180,p90=600', 'trace'."""
    text = text.strip()
    try:
        if text.isdigit():
            return Fixed(tokens=int(text))
        if text == "trace":
            return FromTrace()
        kind, _, rest = text.partition(":")
        if kind == "fixed":
            return Fixed(tokens=int(rest))
        if kind == "uniform":
            lo, hi = rest.split(":")
            return _check(Uniform(lo=int(lo), hi=int(hi)), field)
        if kind == "lognormal":
            kv = dict(p.split("=") for p in rest.split(",") if p)
            conv = {k: float(v) if k not in ("min", "max") else int(v) for k, v in kv.items()}
            return msgspec.convert(conv, LogNormal)
    except (ValueError, TypeError, msgspec.ValidationError) as exc:
        raise ValidationError(f"cannot parse {text!r}: {exc}", field=field) from None
    raise ValidationError(
        f"cannot parse {text!r}; expected N, uniform:LO:HI, lognormal:mean=M,sigma=S, "
        "lognormal:median=M,p90=P or trace", field=field)


def _check(cfg: msgspec.Struct, field: str) -> msgspec.Struct:
    if isinstance(cfg, Uniform) and cfg.hi < cfg.lo:
        raise ValidationError("hi must be >= lo", field=field)
    return cfg
