"""The cluster topology on loopback: three clustered nats-servers (JetStream streams and KV with
3 replicas), SeaweedFS, the orchestrator, two api replicas and pool simulators, each a process
with its own data directory. Mid-run one NATS node and then the api replica the SSE clients
stream from are killed with SIGKILL and started again: the run completes, every sim has one
result and one completion event, and every client, reconnecting to the other replica with
Last-Event-ID, got exactly the run's events in the stream, in order, none twice. The node killed
is first the one holding the SSE streams' JetStream consumers (the api opens them again after
the last event sent, or drops what a consumer its restarted node made again replays), then
another.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from programs.bench._cluster import ClusterTopology
from programs.bench.cluster import healthy, scenario


@pytest.fixture
def topology(tmp_path: Path) -> Iterator[ClusterTopology]:
    topo = ClusterTopology(tmp_path / "cluster", simulators=2)
    try:
        topo.start()
        yield topo
    finally:
        topo.stop()


@pytest.mark.parametrize("node", [-1, 2], ids=["node-holding-the-sse-consumers", "node-2"])
def test_a_run_survives_a_nats_node_and_an_api_replica_killed(topology: ClusterTopology,
                                                               node: int) -> None:
    args = argparse.Namespace(configs="SM90_H100,SM80_A100", replicas=2, kernels=400,
                              chunk_delay=0.1, sse_clients=2, node=node, down=2.0, seed=0,
                              timeout=180.0)
    result = asyncio.run(scenario(topology, args))
    killed = result["nats_node"]
    assert node in (-1, killed)
    assert [f["part"] for f in result["faults"]] == [f"nats-{killed}", "api-1"]
    if node == -1:  # the SSE streams' consumers went with it (the streams went on regardless)
        assert result["node_held_sse_consumers"]
    assert result["run_state"] == "completed", result
    assert result["sims"] == 4 and result["with_result"] == 4, result
    assert result["duplicated"] == 0 and result["missing"] == 0, result
    for client in result["sse"]:
        assert client["finished"] and client["reconnects"] >= 1, client
        # in full on a failure: which events, after which reconnect, before or after the run's end
        assert client["missing"] == 0 and client["twice"] == 0 and client["exact"], json.dumps(client)
    assert healthy(result)
    # the killed parts were started again and run
    assert topology.restarts == {f"nats-{killed}": 1, "api-1": 1}
    assert all(topology.procs[p].poll() is None for p in (f"nats-{killed}", "api-1"))
