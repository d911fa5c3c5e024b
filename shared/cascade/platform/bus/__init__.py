"""The NATS JetStream bus: connect, streams, typed publish/subscribe, KV, work-queue workers.

Modules: :mod:`~cascade.platform.bus.connection` (connect, :class:`Bus`),
:mod:`~cascade.platform.bus.consumer` (the one consumer loop, listeners),
:mod:`~cascade.platform.bus.kv` (typed KV buckets).

Typical use inside a service::

    bus = await connect(settings, name="cascade-prepare")
    await bus.ensure_streams()
    await bus.publish(subjects.trace_event(tid, "created"), TraceCreated(...), msg_id=f"created:{tid}")
    worker = await bus.run_worker(subjects.JOB_PREPARE, subjects.DURABLE_PREPARE_JOBS,
                                  PrepareJob, handle_prepare, concurrency=2,
                                  on_exhausted=report_failure)
    ...
    await worker.stop()      # drains: in-flight jobs finish or are handed back
    await bus.close()

Every handler has the signature ``async def handler(message: T, delivery: Delivery) -> None``.
"""

from cascade.platform.bus.connection import Bus, connect
from cascade.platform.bus.consumer import (
    BusStats,
    Consumer,
    ConsumerStats,
    Delivery,
    ExhaustedCallback,
    Handler,
    Listener,
)
from cascade.platform.bus.kv import KV, KVChange, KVEntry, KVMirror

__all__ = [
    "KV",
    "Bus",
    "BusStats",
    "Consumer",
    "ConsumerStats",
    "Delivery",
    "ExhaustedCallback",
    "Handler",
    "KVChange",
    "KVEntry",
    "KVMirror",
    "Listener",
    "connect",
]
