"""`cascade bench cluster`: the cluster topology on loopback, a NATS node and an api replica
killed mid-run.

Starts :class:`programs.bench._cluster.ClusterTopology` (three clustered nats-servers with
JetStream R3 streams and KV, SeaweedFS, the orchestrator on the ``pool`` backend, two api
replicas and ``--simulators`` pool simulators, every one a process with its own data
directory), stores a ready ``--kernels``-kernel timeline trace and starts one run of
``--configs`` x ``--replicas`` sims through api-0, paced by ``--chunk-delay``. ``--sse-clients``
clients follow the run's event stream from api-1; a client whose stream breaks reconnects to
the other replica with ``Last-Event-ID``. Once sims are running, one NATS node (``--node``;
by default the one holding the SSE streams' JetStream consumers) is killed with SIGKILL and
started again ``--down`` seconds later; then api-1 is killed the same way while the clients
stream from it.

Printed: whether the run completed, sims with a result, results and completion events
duplicated or missing (S3 objects per sim, ``cascade.sim.{id}.completed`` messages per sim),
and per SSE client its reconnects and whether the events it got are exactly the run's events
in the stream (none missing, none twice, in order). Exit 1 when anything is off.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

NAME = "cluster"
HELP = "3 clustered NATS nodes, 2 apis, pool simulators: kill -9 a NATS node and an api mid-run"
CONFIGS = "SM90_H100,SM80_A100,SM90_H200"
#: Run states a run event ends a client's stream on.
END_STATES = ("completed", "partial", "failed", "cancelled")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``cascade bench cluster``."""
    parser.add_argument("--configs", default=CONFIGS, help=f"configs of the run (default {CONFIGS})")
    parser.add_argument("--replicas", type=int, default=4, help="replicas per config (default 4)")
    parser.add_argument("--simulators", type=int, default=3, help="pool simulators (default 3)")
    parser.add_argument("--kernels", type=int, default=600, help="kernels of the trace (default 600)")
    parser.add_argument("--chunk-delay", type=float, default=0.04,
                        help="seconds between a sim's chunks (about 100 chunks; default 0.04)")
    parser.add_argument("--sse-clients", type=int, default=4, help="SSE clients on api-1 (default 4)")
    parser.add_argument("--node", type=int, default=-1,
                        help="NATS node to kill (0-2; default: the one holding the SSE streams' "
                             "consumers)")
    parser.add_argument("--down", type=float, default=3.0,
                        help="seconds a killed part stays down (default 3)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the node choice (default 0)")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds for the run (default 240)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--keep", action="store_true", help="keep the work directory and logs")


# ---- SSE clients ------------------------------------------------------------------------------

class SSEClient:
    """Follows a run's event stream, reconnecting to another api with Last-Event-ID."""

    def __init__(self, bases: list[str], run_id: str) -> None:
        self.bases = bases
        self.run_id = run_id
        self.ids: list[int] = []
        self.last: int | None = None
        """Id of the last event received (sent as Last-Event-ID on a reconnect)."""
        self.frames = 0
        self.reconnects = 0
        self.finished = False
        self.errors: list[str] = []
        self.reconnect_ids: list[int | None] = []
        """Last-Event-ID of each reconnect."""

    async def follow(self, deadline: float) -> None:
        import aiohttp

        target = 0
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=3, sock_read=20)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            while not self.finished and time.monotonic() < deadline:
                headers = {"Last-Event-ID": str(self.last)} if self.last is not None else {}
                url = f"{self.bases[target]}/api/runs/{self.run_id}/events"
                try:
                    async with http.get(url, headers=headers) as resp:
                        if resp.status != 200:
                            raise aiohttp.ClientResponseError(resp.request_info, (), status=resp.status)
                        await self._read(resp)
                except (aiohttp.ClientError, TimeoutError, ConnectionError) as exc:
                    self.errors.append(f"{self.bases[target]}: {type(exc).__name__}")
                if not self.finished:
                    self.reconnects += 1
                    self.reconnect_ids.append(self.last)
                    target = (target + 1) % len(self.bases)
                    await asyncio.sleep(0.2)

    async def _read(self, resp: Any) -> None:
        event_id: int | None = None
        event = ""
        data = ""
        while True:
            # pings come every 15 s: 20 s of silence is a dead connection (a killed api)
            raw = await asyncio.wait_for(resp.content.readline(), 20.0)
            if not raw:
                break
            line = raw.decode().rstrip("\n")
            if line.startswith("id: "):
                event_id = int(line[4:])
            elif line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                data = line[6:]
            elif line == "" and event:
                self.frames += 1
                if event_id is not None:
                    self.ids.append(event_id)
                    self.last = event_id
                body = json.loads(data) if data else {}
                if event == "run" and body.get("state") in END_STATES:
                    self.finished = True
                event_id, event, data = None, "", ""


# ---- the checks -------------------------------------------------------------------------------

async def stream_ids(bus: Any, run: dict[str, Any]) -> tuple[list[int], int | None]:
    """Sequences of the run's events an SSE stream from the start serves (every run and sim
    event the api turns into a frame), read from the CASCADE stream, and the sequence of the
    first run event in an end state (where a client following the stream stops; None: none)."""
    from nats.js import api as jsapi
    from nats.js.errors import ServiceUnavailableError

    from cascade.platform import subjects
    from cascade.platform.runevents import run_event_data, sim_event_data

    filters = [subjects.run_events(run["id"]), *(subjects.sim_events(s) for s in run["sim_ids"])]
    info = await bus.jsm.add_consumer(subjects.EVENTS_STREAM, config=jsapi.ConsumerConfig(
        ack_policy=jsapi.AckPolicy.NONE, deliver_policy=jsapi.DeliverPolicy.ALL,
        filter_subjects=filters, inactive_threshold=30.0, mem_storage=True, num_replicas=1))
    sub = await bus.js.pull_subscribe_bind(durable=None, stream=subjects.EVENTS_STREAM, name=info.name)
    out: list[int] = []
    end: int | None = None
    unavailable = 0
    try:
        while True:
            try:
                msgs = await sub.fetch(512, timeout=1.0)
            except TimeoutError:
                break
            except ServiceUnavailableError:  # the new consumer's replica not ready yet (a node just came back)
                unavailable += 1
                if unavailable > 20:
                    raise
                await asyncio.sleep(0.5)
                continue
            for msg in msgs:
                sim = msg.subject.startswith(f"{subjects.PREFIX}.sim.")
                data = sim_event_data(msg.data) if sim else run_event_data(msg.data)
                if data is not None:
                    out.append(msg.metadata.sequence.stream)
                    if end is None and not sim and getattr(data, "state", None) in END_STATES:
                        end = msg.metadata.sequence.stream
    finally:
        await sub.unsubscribe()
        await bus.jsm.delete_consumer(subjects.EVENTS_STREAM, info.name)
    return out, end


async def check(topology: Any, run: dict[str, Any], clients: list[SSEClient]) -> dict[str, Any]:
    """Results and completions per sim; each SSE client's events against the stream's."""
    from cascade.platform import subjects
    from cascade.platform.bus import connect
    from cascade.platform.keys import result_key
    from cascade.platform.storage import Storage

    settings = topology.settings()
    bus = await connect(settings, name="cascade-bench-cluster-check")
    try:
        async with Storage.from_settings(settings) as storage:
            stream = await bus.jsm.stream_info(subjects.EVENTS_STREAM,
                                               subjects_filter=subjects.sim_event("*", "completed"))
            completions = stream.state.subjects or {}
            duplicated = missing = with_result = 0
            for sim_id in run["sim_ids"]:
                objects = [o.key async for o in storage.list(result_key(run["id"], sim_id))]
                events = completions.get(subjects.sim_event(sim_id, "completed"), 0)
                with_result += bool(objects)
                duplicated += len(objects) > 1 or events > 1
                missing += not objects or events == 0
            expected, end = await stream_ids(bus, run)
    finally:
        await bus.close()
    sse = []
    for c in clients:
        lost = sorted(set(expected) - set(c.ids))
        sse.append({"events": len(c.ids), "reconnects": c.reconnects, "finished": c.finished,
                    "missing": len(lost),
                    # which, and how many the stream took after the run's end event (a client stops there)
                    "missing_ids": lost[:8], "missing_after_end": sum(end is not None and i > end for i in lost),
                    "reconnected_after": c.reconnect_ids[:4],
                    "twice": len(c.ids) - len(set(c.ids)),
                    "in_order": c.ids == sorted(c.ids), "exact": c.ids == expected,
                    "errors": c.errors[:4]})
    return {"sims": len(run["sim_ids"]), "with_result": with_result, "duplicated": duplicated,
            "missing": missing, "stream_events": len(expected), "sse": sse}


# ---- the scenario -----------------------------------------------------------------------------

def _get(url: str, timeout: float = 3.0) -> Any:
    import urllib.request

    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read())


def _post(url: str, body: Any) -> Any:
    import urllib.request

    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


async def _poll_run(topology: Any, run_id: str, want: Any, deadline: float) -> dict[str, Any]:
    """The run detail (from whichever api answers) once ``want(detail)`` holds."""
    last: dict[str, Any] = {}
    while time.monotonic() < deadline:
        for i in range(topology.apis):
            try:
                last = await asyncio.to_thread(_get, f"{topology.api_url(i)}/api/runs/{run_id}")
            except (OSError, ValueError):
                continue
            if want(last):
                return last
            break
        await asyncio.sleep(0.2)
    return last


async def scenario(topology: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Store a trace, start the run, follow it over SSE, kill a NATS node and api-1 mid-run."""
    from cascade.platform.bus import connect
    from cascade.platform.storage import Storage
    from programs.bench._runbed import generate_timeline, publish_trace

    settings = topology.settings()
    bus = await connect(settings, name="cascade-bench-cluster")
    try:
        async with Storage.from_settings(settings) as storage:
            trace = await publish_trace(bus, storage, f"tr-cluster{int(time.time())}",
                                        generate_timeline(args.kernels), name="cluster bench")
    finally:
        await bus.close()
    started = time.monotonic()
    deadline = started + args.timeout
    accepted = await asyncio.to_thread(_post, f"{topology.api_url(0)}/api/runs", {
        "trace_id": trace.id, "configs": args.configs.split(","), "replicas": args.replicas,
        "options": {"chunk_delay_s": args.chunk_delay}, "name": "cascade bench cluster"})
    run_id = str(accepted["id"])
    bases = [topology.api_url(1), topology.api_url(0)]
    clients = [SSEClient(bases, run_id) for _ in range(args.sse_clients)]
    followers = [asyncio.create_task(c.follow(deadline)) for c in clients]
    faults: list[dict[str, Any]] = []
    opened = 0

    def running(d: dict[str, Any]) -> bool:
        return bool(sum(s["state"] == "running" for s in d.get("sims", [])) >= 2)

    await _poll_run(topology, run_id, running, deadline)
    hosts = await sse_consumer_hosts(topology, run_id)
    node = args.node if args.node >= 0 else (
        hosts[0] if hosts else random.Random(args.seed).randrange(3))
    for part in (f"nats-{node}", "api-1"):
        if part == "api-1":  # before it goes: did its streams replace the consumers lost?
            opened = await asyncio.to_thread(_events_opened, topology.api_url(1))
        t_kill = time.monotonic()
        done_before = sum(s["state"] == "completed" for s in
                          (await _poll_run(topology, run_id, lambda d: True, deadline)).get("sims", []))
        await asyncio.to_thread(topology.kill, part)
        await asyncio.sleep(args.down)
        await asyncio.to_thread(topology.restart, part)
        def progressed(d: dict[str, Any], before: int = done_before) -> bool:
            return (d.get("run", {}).get("state") in ("completed", "partial", "failed", "cancelled")
                    or sum(s["state"] == "completed" for s in d.get("sims", [])) > before)

        detail = await _poll_run(topology, run_id, progressed, deadline)
        faults.append({"part": part, "at_s": t_kill - started, "down_s": args.down,
                       "progressed_after_s": time.monotonic() - t_kill,
                       "run_state": detail.get("run", {}).get("state")})
    final = await _poll_run(topology, run_id, lambda d: d.get("run", {}).get("state")
                            in ("completed", "partial", "failed", "cancelled"), deadline)
    await asyncio.wait(followers, timeout=max(1.0, deadline - time.monotonic()))
    for task in followers:
        task.cancel()
    result = await check(topology, final["run"], clients)
    failed_sims = [{"id": s.get("id"), "state": s.get("state"), "attempts": s.get("attempts"),
                    "error": s.get("error")} for s in final.get("sims", []) if s.get("state") != "completed"]
    return {"run_id": run_id, "run_state": final.get("run", {}).get("state"),
            "run_error": final.get("run", {}).get("error"), "not_completed": failed_sims,
            "run_s": time.monotonic() - started, "faults": faults, "nats_node": node,
            "node_held_sse_consumers": node in hosts,
            "sse_consumers_reopened": max(0, opened - len(clients)), **result}


async def sse_consumer_hosts(topology: Any, run_id: str, timeout: float = 10.0) -> list[int]:
    """The NATS nodes (0-2) holding the run's SSE consumers, most used first (each stream's
    consumer lives on one node)."""
    from cascade.platform import subjects
    from cascade.platform.bus import connect

    bus = await connect(topology.settings(), name="cascade-bench-cluster-probe")
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            counts: dict[int, int] = {}
            for info in await bus.jsm.consumers_info(subjects.EVENTS_STREAM):
                filters = info.config.filter_subjects or []
                if any(run_id in f for f in filters) and info.cluster and info.cluster.leader:
                    node = int(str(info.cluster.leader).rsplit("-", 1)[-1])
                    counts[node] = counts.get(node, 0) + 1
            if counts:
                return sorted(counts, key=lambda n: -counts[n])
            await asyncio.sleep(0.2)
        return []
    finally:
        await bus.close()


def _events_opened(base: str) -> int:
    """JetStream consumers the api at ``base`` opened for event streams so far (its /metrics)."""
    import urllib.request

    with urllib.request.urlopen(f"{base}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    for line in text.splitlines():
        if line.startswith('cascade_bus_jetstream_consumers_created_total{purpose="events"}'):
            return int(float(line.rsplit(" ", 1)[1]))
    return 0


def healthy(result: dict[str, Any]) -> bool:
    """Every sim completed once with one result, every SSE client got exactly the stream."""
    return (result["run_state"] == "completed" and result["with_result"] == result["sims"]
            and result["duplicated"] == 0 and result["missing"] == 0
            and all(c["finished"] and c["exact"] for c in result["sse"]))


def print_result(r: dict[str, Any], args: argparse.Namespace, startup_s: float) -> None:
    """The human-readable report."""
    print(f"cascade bench cluster: 3 NATS nodes (JetStream R3), 2 apis, {args.simulators} pool "
          f"simulators; started in {startup_s:.1f} s")
    print(f"  run {r['run_id']}: {r['run_state']} in {r['run_s']:.1f} s, {r['with_result']} of "
          f"{r['sims']} sims with a result, {r['duplicated']} duplicated, {r['missing']} missing")
    held = "held" if r["node_held_sse_consumers"] else "did not hold"
    print(f"  NATS node {r['nats_node']} {held} the SSE streams' consumers; api-1 opened "
          f"{r['sse_consumers_reopened']} consumers again after it went")
    for f in r["faults"]:
        print(f"  kill -9 {f['part']} at {f['at_s']:.1f} s, back after {f['down_s']:g} s: "
              f"next sim completed {f['progressed_after_s']:.1f} s after the kill")
    for i, c in enumerate(r["sse"]):
        print(f"  SSE client {i}: {c['events']} events of {r['stream_events']}, {c['reconnects']} "
              f"reconnects, {c['missing']} missing, {c['twice']} twice, "
              f"{'in order' if c['in_order'] else 'OUT OF ORDER'}, "
              f"{'exactly the stream' if c['exact'] else 'NOT the stream'}")
    print(f"  verdict: {'ok' if healthy(r) else 'FAILED'}")


def run(args: argparse.Namespace) -> int:
    """Run the benchmark and print its figures."""
    from programs.bench._cluster import ClusterTopology

    workdir = Path(tempfile.mkdtemp(prefix="cascade-bench-cluster-"))
    topology = ClusterTopology(workdir, simulators=args.simulators)
    try:
        startup = topology.start()
        result = asyncio.run(scenario(topology, args))
    finally:
        topology.stop()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        print(json.dumps({"startup_s": startup, **result}, indent=1))
    else:
        print_result(result, args, startup)
        if args.keep:
            print(f"  work directory and logs kept in {workdir}")
    return 0 if healthy(result) else 1
