"""Text summary of a ScenarioResult laid out like ``vllm bench serve`` prints it."""

from __future__ import annotations

from cascade.serving.scenario import ScenarioResult


def _line(label: str, value: float | str, fmt: str = ".2f") -> str:
    if isinstance(value, str):
        return f"{label:<40} {value:<10}"
    if isinstance(value, int):
        return f"{label:<40} {value:<10}"
    return f"{label:<40} {value:<10{fmt}}"


def _section(title: str) -> str:
    return f"{title:-^50}"


def format_summary(res: ScenarioResult, *, title: str = " Serving Benchmark Result ") -> str:
    """vllm-bench-serve-style text (plus a Cascade section: queue, preemptions, KV, steps)."""
    lines = [f"{title:=^50}",
             _line("Successful requests:", res.completed),
             _line("Benchmark duration (s):", res.duration_s),
             _line("Total input tokens:", res.total_input_tokens),
             _line("Total generated tokens:", res.total_output_tokens),
             _line("Request throughput (req/s):", res.request_throughput)]
    if res.request_goodput is not None:
        lines.append(_line("Request goodput (req/s):", res.request_goodput))
    lines += [_line("Output token throughput (tok/s):", res.output_throughput),
              _line("Total Token throughput (tok/s):", res.total_token_throughput)]
    for header, key, stats in (
        ("Time to First Token", "TTFT", res.ttft_ms),
        ("Time per Output Token (excl. 1st token)", "TPOT", res.tpot_ms),
        ("Inter-token Latency", "ITL", res.itl_ms),
        ("End-to-end Latency", "E2EL", res.e2el_ms),
        ("Queue Time", "queue time", res.queue_ms),
    ):
        lines.append(_section(header))
        lines.append(_line(f"Mean {key} (ms):", stats.mean))
        lines.append(_line(f"Median {key} (ms):", stats.median))
        lines.append(_line(f"Std {key} (ms):", stats.std))
        for p in ("p90", "p95", "p99"):
            lines.append(_line(f"P{p[1:]} {key} (ms):", getattr(stats, p)))
    lines.append(_section("Cascade"))
    if res.slo_attainment is not None:
        lines.append(_line("SLO attainment (%):", 100 * res.slo_attainment))
    lines += [_line("Replicas:", len(res.replicas)),
              _line("Engine steps:", res.steps),
              _line("Preemptions:", res.preemptions),
              _line("KV cache blocks per replica:", res.kv_cache.capacity_blocks),
              _line("Mean KV cache usage (%):", 100 * res.kv_cache.mean_utilisation),
              _line("Max KV cache usage (%):", 100 * res.kv_cache.max_utilisation)]
    if res.extrapolated:
        dims = ", ".join(f"{k}={v.value:g} (calibrated {v.low:g}..{v.high:g})"
                         for k, v in res.extrapolation.items())
        lines.append(f"Extrapolated: {dims}")
    lines.append("=" * 50)
    return "\n".join(lines)
