"""`cascade bench load`: registered with its options; its figures computed from raw latencies."""

from __future__ import annotations

import argparse

import pytest

from programs.bench import load
from programs.cli import bench


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    bench.register(parser.add_subparsers(dest="command"))
    return parser


def test_registered_with_its_options() -> None:
    args = _parser().parse_args(["bench", "load", "--clients", "7", "--duration", "1.5", "--json"])
    assert args.func is load.run
    assert (args.clients, args.duration, args.json) == (7, 1.5, True)
    defaults = _parser().parse_args(["bench", "load"])
    assert (defaults.clients, defaults.json) == (200, False)


def test_figures_per_route_and_healthz() -> None:
    names = [name for name, _ in load.MIX]
    samples = {name: [] for name in names}
    samples["GET /api/runs"] = [float(v) for v in range(1, 101)]  # 1..100 ms
    errors = dict.fromkeys(names, 0)
    errors["GET /api/runs"] = 3
    raw = {"samples": samples, "errors": errors, "statuses": {n: {} for n in names}, "elapsed": 10.0,
           "probes": [(5.0, 200), (150.0, 200), (1.0, 0)], "idle_probes": [(1.0, 200), (2.0, 200)],
           "client_cpu_s": 1.0, "stack_cpu_s": {"api": 2.0}}
    args = argparse.Namespace(clients=200)
    f = load.figures(raw, args, "cascade/t/SM90_H100")
    runs = f["routes"]["GET /api/runs"]
    assert runs["requests"] == 100 and runs["errors"] == 3 and runs["rps"] == pytest.approx(10.0)
    assert runs["p50_ms"] == pytest.approx(50.5) and runs["p99_ms"] == pytest.approx(99.01)
    assert f["routes"]["GET /v1/models"]["p50_ms"] is None
    assert (f["requests"], f["errors"]) == (100, 3)
    h = f["healthz"]
    assert (h["probes"], h["failed"], h["max_ms"]) == (3, 1, 150.0)
    assert h["idle_p50_ms"] == pytest.approx(1.5)


def test_only_picks_route_classes_and_groups() -> None:
    assert [n for n, _ in load._mix("traces")] == [
        "GET /api/traces", "GET /api/traces/{id}", "GET /api/traces/{id}/kernels"]
    assert [n for n, _ in load._mix("runs,GET /v1/models")] == [
        "GET /api/runs", "GET /api/runs/{id}", "GET /v1/models"]
    assert load._mix("") == load.MIX
    with pytest.raises(SystemExit, match="unknown route class"):
        load._mix("traces,GET /nope")
