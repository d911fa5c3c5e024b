"""The bus against a real nats-server: connect, streams, publish/consume, workers, KV."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import nats.js.errors
import pytest
from nats.js import api as jsapi

from cascade.errors import (
    BusConfigDriftError,
    BusUnavailableError,
    ConflictError,
    JobTimeoutError,
)
from cascade.platform import subjects
from cascade.platform.bus import Bus, Delivery, connect
from cascade.platform.messages import (
    SimEvent,
    SimFailed,
    SimJob,
    TraceCreated,
    TraceEvent,
)
from cascade.platform.settings import Settings
from programs.embedded.nats import NatsServer
from tests.support.fixtures_nats import nats_settings, unique
from tests.support.wait import wait_until


def _job(sim_id: str = "s1") -> SimJob:
    return SimJob(run_id="r1", sim_id=sim_id, trace_id="t1", bundle_key="bundles/t1/h/", config="SM90_H100")


@pytest.fixture
async def worker_subject(bus: Bus) -> AsyncIterator[tuple[str, str]]:
    """A private work-queue subject and durable name; the consumer is removed afterwards."""
    subject, durable = f"cascade.jobs.{unique('test')}", unique("dur")
    yield subject, durable
    with contextlib.suppress(nats.js.errors.NotFoundError):
        await bus.jsm.delete_consumer(subjects.JOBS_STREAM, durable)


async def test_ensure_streams_is_idempotent(bus: Bus) -> None:
    again = await bus.ensure_streams()
    assert set(again.values()) == {"ok"}
    assert set(again) == {subjects.EVENTS_STREAM, subjects.JOBS_STREAM, *subjects.KV_BUCKETS}
    jobs = await bus.jsm.stream_info(subjects.JOBS_STREAM)
    assert jobs.config.retention == jsapi.RetentionPolicy.WORK_QUEUE
    events = await bus.jsm.stream_info(subjects.EVENTS_STREAM)
    assert sorted(events.config.subjects or []) == sorted(subjects.EVENTS_SUBJECTS)
    assert events.config.duplicate_window == pytest.approx(bus.settings.duplicate_window_s)


async def test_drift_is_detected_or_repaired(tmp_path: Path) -> None:
    with NatsServer(tmp_path / "nats") as server:
        b = await connect(nats_settings(server.url))
        try:
            await b.jsm.add_stream(name=subjects.EVENTS_STREAM, subjects=[subjects.TRACE_EVENTS])
            await b.jsm.add_stream(
                name=subjects.JOBS_STREAM, subjects=[subjects.JOBS],
                retention=jsapi.RetentionPolicy.LIMITS,
            )
            with pytest.raises(BusConfigDriftError, match="retention"):
                await b.ensure_streams()
            events = await b.jsm.stream_info(subjects.EVENTS_STREAM)
            assert sorted(events.config.subjects or []) == sorted(subjects.EVENTS_SUBJECTS)
            await b.jsm.delete_stream(subjects.JOBS_STREAM)
            outcome = await b.ensure_streams()
            assert outcome[subjects.EVENTS_STREAM] == "ok"
            assert outcome[subjects.JOBS_STREAM] == "created"
        finally:
            await b.close()


async def test_publish_and_subscribe_typed(bus: Bus) -> None:
    tid = unique()
    got: asyncio.Queue[tuple[TraceEvent, Delivery]] = asyncio.Queue()

    async def handler(event: TraceEvent, delivery: Delivery) -> None:
        await got.put((event, delivery))

    await bus.subscribe(subjects.trace_events(tid), TraceEvent, handler)
    sent = TraceCreated(trace_id=tid, name="opt", source_gpu="SM90_H100")
    await bus.publish(subjects.trace_event(tid, "created"), sent, msg_id=f"created-{tid}")
    event, delivery = await asyncio.wait_for(got.get(), 5)
    assert event == sent
    assert isinstance(event, TraceCreated)
    assert delivery.subject == subjects.trace_event(tid, "created")
    assert delivery.msg_id == f"created-{tid}"
    assert delivery.headers[subjects.HDR_MSG_TYPE] == "trace.created.v1"
    assert delivery.attempt == 1


async def test_duplicate_msg_id_is_stored_once(bus: Bus) -> None:
    tid = unique()
    subject = subjects.trace_event(tid, "created")
    msg = TraceCreated(trace_id=tid, name="n", source_gpu="SM90_H100")
    first = await bus.publish(subject, msg, msg_id=f"dup-{tid}")
    second = await bus.publish(subject, msg, msg_id=f"dup-{tid}")
    third = await bus.publish(subject, msg, msg_id=f"other-{tid}")
    assert not first.duplicate
    assert second.duplicate and second.seq == first.seq
    assert third.seq > first.seq
    info = await bus.jsm.stream_info(subjects.EVENTS_STREAM, subjects_filter=subject)
    assert info.state.subjects == {subject: 2}


async def test_publish_many_pipelines_acks(bus: Bus) -> None:
    tid = unique()
    subject = subjects.trace_event(tid, "state")
    items = [(subject, f'{{"n":{i}}}'.encode(), f"{tid}-{i}") for i in range(200)]
    acks = await bus.publish_many(items)
    assert len(acks) == 200
    seqs = [a.seq for a in acks]
    assert seqs == sorted(seqs) and len(set(seqs)) == 200
    again = await bus.publish_many(items[:10])
    assert all(a.duplicate for a in again)


async def test_publish_to_unknown_subject_is_a_clear_error(bus: Bus) -> None:
    with pytest.raises(BusConfigDriftError, match="no stream stores"):
        await bus.publish("nowhere.at.all", b"{}")


async def test_publish_rides_through_a_stream_leader_election(bus: Bus, monkeypatch: pytest.MonkeyPatch) -> None:
    """A clustered stream answers 'no responders' while it elects a new leader (a node went
    away): the publish waits it out within its timeout instead of calling it drift, and a
    stream that stays leaderless past the timeout is 'unavailable', not 'run ensure_streams'."""

    real = bus.js.publish
    calls: list[int] = []

    async def leaderless_twice(*args: object, **kwargs: object) -> object:
        calls.append(1)
        if len(calls) <= 2:
            raise nats.js.errors.NoStreamResponseError
        return await real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(bus.js, "publish", leaderless_twice)
    tid = unique()
    before = bus.stats.publish_retries
    ack = await bus.publish(subjects.trace_event(tid, "state"), b"{}", msg_id=f"{tid}-1")
    assert ack.seq > 0 and len(calls) == 3 and bus.stats.publish_retries - before == 2

    async def leaderless(*args: object, **kwargs: object) -> object:
        raise nats.js.errors.NoStreamResponseError

    monkeypatch.setattr(bus.js, "publish", leaderless)
    with pytest.raises(BusUnavailableError, match="no leader"):
        await bus.publish(subjects.trace_event(tid, "state"), b"{}", timeout=0.5)
    with pytest.raises(BusConfigDriftError, match="no stream stores"):
        await bus.publish("nowhere.at.all", b"{}", timeout=0.5)
    with pytest.raises(BusConfigDriftError, match="no stream stores nowhere.at.all"):
        await bus.publish_many([("nowhere.at.all", b"{}", None)], timeout=2.0)


async def test_worker_retries_then_succeeds(bus: Bus, worker_subject: tuple[str, str]) -> None:
    subject, durable = worker_subject
    attempts: list[int] = []
    done = asyncio.Event()

    async def handler(job: SimJob, delivery: Delivery) -> None:
        attempts.append(delivery.attempt)
        if delivery.attempt == 1:
            raise RuntimeError("transient")
        done.set()

    await bus.run_worker(subject, durable, SimJob, handler, max_deliver=3, backoff=(0.1,), ack_wait=5)
    await bus.publish(subject, _job(), msg_id=unique())
    await asyncio.wait_for(done.wait(), 10)
    assert attempts == [1, 2]


async def test_redelivery_after_crash_without_ack(
    bus_settings: Settings, bus: Bus, worker_subject: tuple[str, str]
) -> None:
    subject, durable = worker_subject
    started = asyncio.Event()
    crashed_bus = await connect(bus_settings)

    async def hangs(job: SimJob, delivery: Delivery) -> None:
        started.set()
        await asyncio.Event().wait()

    crashed = await crashed_bus.run_worker(subject, durable, SimJob, hangs, ack_wait=1.0)
    await bus.publish(subject, _job("crash"), msg_id=unique())
    await asyncio.wait_for(started.wait(), 5)
    await crashed_bus.nc.close()  # the process "dies": no ack, no nak, no heartbeats

    got: asyncio.Queue[tuple[SimJob, int]] = asyncio.Queue()

    async def works(job: SimJob, delivery: Delivery) -> None:
        await got.put((job, delivery.attempt))

    await bus.run_worker(subject, durable, SimJob, works, ack_wait=1.0)
    job, attempt = await asyncio.wait_for(got.get(), 10)
    assert job.sim_id == "crash"
    assert attempt == 2
    for task in list(crashed._tasks):
        task.cancel()


async def test_heartbeats_keep_a_long_job(bus: Bus, worker_subject: tuple[str, str]) -> None:
    subject, durable = worker_subject
    attempts: list[int] = []
    done = asyncio.Event()

    async def slow(job: SimJob, delivery: Delivery) -> None:
        attempts.append(delivery.attempt)
        await asyncio.sleep(2.5)  # the job's own work: 2.5x the ack wait
        done.set()

    worker = await bus.run_worker(
        subject, durable, SimJob, slow, concurrency=2, ack_wait=1.0, heartbeat_interval=0.2
    )
    await bus.publish(subject, _job(), msg_id=unique())
    await asyncio.wait_for(done.wait(), 10)
    assert attempts == [1]
    assert worker.stats.acked == 1


async def test_exhausted_job_publishes_failure_event(bus: Bus, worker_subject: tuple[str, str]) -> None:
    subject, durable = worker_subject
    sim_id = unique("sim")
    failures: asyncio.Queue[SimEvent] = asyncio.Queue()

    async def on_failed(event: SimEvent, delivery: Delivery) -> None:
        await failures.put(event)

    await bus.listen(subjects.sim_event(sim_id, "failed"), SimEvent, on_failed)

    async def always_fails(job: SimJob, delivery: Delivery) -> None:
        raise RuntimeError(f"model exploded on attempt {delivery.attempt}")

    async def report(job: SimJob, error: BaseException, attempts: int) -> None:
        await bus.publish(
            subjects.sim_event(job.sim_id, "failed"),
            SimFailed(sim_id=job.sim_id, run_id=job.run_id, error=str(error), attempts=attempts),
            msg_id=f"failed-{job.sim_id}",
        )

    worker = await bus.run_worker(
        subject, durable, SimJob, always_fails, max_deliver=2, backoff=(0.05,), on_exhausted=report
    )
    await bus.publish(subject, _job(sim_id), msg_id=unique())
    event = await asyncio.wait_for(failures.get(), 10)
    assert isinstance(event, SimFailed)
    assert event.attempts == 2
    assert "attempt 2" in event.error
    # the worker counts the failure once its report has been published: wait for it
    await wait_until(lambda: worker.stats.failed, 4, what="the worker to count the failure", interval=0.02)
    assert worker.stats.failed == 1 and worker.stats.retried == 1
    depth = (await bus.queue_depths())[durable]
    assert depth["pending"] == 0


async def test_crashed_last_attempt_is_still_reported(
    bus_settings: Settings, bus: Bus, worker_subject: tuple[str, str]
) -> None:
    subject, durable = worker_subject
    started = asyncio.Event()
    crashed_bus = await connect(bus_settings)

    async def hangs(job: SimJob, delivery: Delivery) -> None:
        started.set()
        await asyncio.Event().wait()

    crashed = await crashed_bus.run_worker(subject, durable, SimJob, hangs, ack_wait=1.0, max_deliver=1)
    await bus.publish(subject, _job("lost"), msg_id=unique())
    await asyncio.wait_for(started.wait(), 5)
    await crashed_bus.nc.close()

    reported: asyncio.Queue[tuple[SimJob, BaseException, int]] = asyncio.Queue()
    handled: list[str] = []

    async def handler(job: SimJob, delivery: Delivery) -> None:
        handled.append(job.sim_id)

    async def on_exhausted(job: SimJob, error: BaseException, attempts: int) -> None:
        await reported.put((job, error, attempts))

    await bus.run_worker(subject, durable, SimJob, handler, ack_wait=1.0, max_deliver=1,
                         on_exhausted=on_exhausted)
    job, error, attempts = await asyncio.wait_for(reported.get(), 10)
    assert job.sim_id == "lost" and attempts == 1
    assert isinstance(error, JobTimeoutError)
    assert handled == []
    for task in list(crashed._tasks):
        task.cancel()


async def test_malformed_job_is_terminated_not_retried(bus: Bus, worker_subject: tuple[str, str]) -> None:
    subject, durable = worker_subject
    good = asyncio.Event()

    async def handler(job: SimJob, delivery: Delivery) -> None:
        good.set()

    worker = await bus.run_worker(subject, durable, SimJob, handler)
    await bus.publish(subject, b'{"type": "job.sim.v1", "run_id": 5}', msg_id=unique())
    await bus.publish(subject, _job(), msg_id=unique())
    await asyncio.wait_for(good.wait(), 5)
    assert worker.stats.malformed == 1
    assert worker.stats.acked == 1


class Counter(msgspec.Struct, frozen=True):
    n: int


async def test_kv_put_get_cas_and_keys(bus: Bus) -> None:
    kv = await bus.kv(subjects.KV_META)
    base = unique("kv")
    key = subjects.kv_key(base, "counter")
    assert await kv.get(key, Counter) is None
    rev = await kv.create(key, Counter(0))
    with pytest.raises(ConflictError):
        await kv.create(key, Counter(5))
    rev2 = await kv.update(key, Counter(1), revision=rev)
    with pytest.raises(ConflictError):
        await kv.update(key, Counter(2), revision=rev)
    entry = await kv.get(key, Counter)
    assert entry is not None and entry.value == Counter(1) and entry.revision == rev2

    async def bump() -> None:
        await kv.mutate(key, Counter, lambda c: Counter((c.n if c else 0) + 1))

    await asyncio.gather(*(bump() for _ in range(20)))
    final = await kv.get(key, Counter)
    assert final is not None and final.value.n == 21

    await kv.put(subjects.kv_key(base, "other"), Counter(7))
    assert await kv.keys(f"{base}.>") == [f"{base}.counter", f"{base}.other"]
    assert await kv.values(Counter, f"{base}.*") == {f"{base}.counter": Counter(21), f"{base}.other": Counter(7)}
    await kv.delete(f"{base}.other")
    assert await kv.keys(f"{base}.>") == [f"{base}.counter"]
    assert await kv.keys(f"{unique('none')}.>") == []


async def test_kv_watch_sees_changes(bus: Bus) -> None:
    kv = await bus.kv(subjects.KV_META)
    base = unique("w")
    await kv.put(f"{base}.a", Counter(1))
    seen = []
    first = asyncio.Event()

    async def watch() -> None:
        async for change in kv.watch(Counter, f"{base}.>"):
            seen.append((change.key, change.value))
            first.set()
            if len(seen) == 3:
                return

    task = asyncio.create_task(watch())
    await asyncio.wait_for(first.wait(), 5)
    await kv.put(f"{base}.b", Counter(2))
    await kv.delete(f"{base}.a")
    await asyncio.wait_for(task, 5)
    assert seen == [(f"{base}.a", Counter(1)), (f"{base}.b", Counter(2)), (f"{base}.a", None)]
