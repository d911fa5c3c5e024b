"""`cascade bench bus`: events/s published with acks and jobs/s through the worker helper.

Starts its own ``nats-server -js`` in a temporary directory (file storage, as
in production), so the figures include JetStream persistence.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from cascade.platform import subjects
from cascade.platform.bus import Bus, Delivery, connect
from cascade.platform.log import configure_logging
from cascade.platform.messages import SimJob, SimProgress
from cascade.platform.settings import load_settings
from programs.embedded.nats import NatsServer

NAME = "bus"
HELP = "NATS JetStream bus throughput: acked events/s and work-queue jobs/s"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `cascade bench bus`."""
    parser.add_argument("--events", type=int, default=20000, help="events to publish (async acks)")
    parser.add_argument("--batch", type=int, default=1000, help="events in flight per publish_many call")
    parser.add_argument("--sync-events", type=int, default=2000, help="events published one ack at a time")
    parser.add_argument("--jobs", type=int, default=5000, help="jobs pushed through run_worker")
    parser.add_argument("--concurrency", type=int, default=16, help="worker concurrency")


def _progress(i: int) -> SimProgress:
    return SimProgress(sim_id="bench", run_id="bench", kernels_done=i, kernels_total=10**9,
                       percent=0.0, simulated_ns=float(i))


async def _events_async(bus: Bus, n: int, batch: int) -> float:
    subject = subjects.sim_progress("benchasync")
    started = time.perf_counter()
    for lo in range(0, n, batch):
        items = [(subject, _progress(i), f"a{i}") for i in range(lo, min(n, lo + batch))]
        await bus.publish_many(items)
    return n / (time.perf_counter() - started)


async def _events_sync(bus: Bus, n: int) -> float:
    subject = subjects.sim_progress("benchsync")
    started = time.perf_counter()
    for i in range(n):
        await bus.publish(subject, _progress(i), msg_id=f"s{i}")
    return n / (time.perf_counter() - started)


async def _jobs(bus: Bus, n: int, concurrency: int) -> tuple[float, float]:
    done = asyncio.Event()
    count = 0

    async def handler(job: SimJob, delivery: Delivery) -> None:
        nonlocal count
        count += 1
        if count == n:
            done.set()

    jobs = [
        (subjects.JOB_SIM, SimJob(run_id="r", sim_id=f"s{i}", trace_id="t", bundle_key="b/", config="SM90_H100",
                ),
         f"job{i}")
        for i in range(n)
    ]
    started = time.perf_counter()
    for lo in range(0, n, 1000):
        await bus.publish_many(jobs[lo:lo + 1000])
    queued = time.perf_counter() - started
    started = time.perf_counter()
    worker = await bus.run_worker(subjects.JOB_SIM, subjects.DURABLE_SIM_JOBS, SimJob, handler,
                                  concurrency=concurrency, ack_wait=30)
    await asyncio.wait_for(done.wait(), timeout=600)
    elapsed = time.perf_counter() - started
    await worker.stop()
    return n / elapsed, n / queued


async def _main(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="cascade-bench-bus-") as tmp, NatsServer(Path(tmp)) as server:
        settings = load_settings({}, nats_url=server.url, log_level="warning", duplicate_window_s=600)
        configure_logging(settings, "bench")
        bus = await connect(settings, name="cascade-bench")
        try:
            await bus.ensure_streams()
            sync_rate = await _events_sync(bus, args.sync_events)
            async_rate = await _events_async(bus, args.events, args.batch)
            jobs_rate, queue_rate = await _jobs(bus, args.jobs, args.concurrency)
        finally:
            await bus.close()
    print(f"nats-server {server.url} (JetStream file store in a temp dir)")
    print(f"events/s, one ack at a time (publish)      : {sync_rate:10.0f}  ({args.sync_events} events)")
    print(f"events/s, async acks (publish_many, {args.batch:>5}) : {async_rate:10.0f}  ({args.events} events)")
    print(f"jobs/s queued (publish_many)               : {queue_rate:10.0f}  ({args.jobs} jobs)")
    print(f"jobs/s through run_worker (ack each, c={args.concurrency:<3}): {jobs_rate:10.0f}  ({args.jobs} jobs)")
    return 0


def run(args: argparse.Namespace) -> int:
    """Entry point of `cascade bench bus`."""
    return asyncio.run(_main(args))
