"""A sweep on a real two-node Ray cluster (two `ray start` raylets on this machine): every job
completes, its rows are those of the same agent runs in one run on a Ray of its own, and the work
ran on both nodes.

Both nodes run in sessions of their own and are stopped by those sessions afterwards (never
`ray stop`, which would stop every Ray on the machine). Where things ran is read from the GCS
actor table: the public state API (`ray.util.state`) needs the dashboard, which the nodes run
without to start quickly.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from harness.models.model_server import free_port
from tests import tiers
from tests.processes import QUIET, ROOT, run_cli, short_temp_dir, stop_session, wait_for

SEEDS = [0, 1, 2, 3]
NUM_TASKS = 3
# The pool's size left to the cluster (one agent worker per CPU: one on each node).
SETTINGS = ["model=scripted", "embedder=hashing", f"stream.num_tasks={NUM_TASKS}", "cache.enabled=false",
            *[option for option in QUIET if not option.startswith("ray.num_workers=")]]
SWEEP = ["-m", *SETTINGS, f"seed={','.join(map(str, SEEDS))}"]
# What legitimately differs between the sweep and the one run of the same agent runs: ids drawn at
# random, clocks, in-flight counts, and which job ran them with which overrides.
VOLATILE = {"call_id", "started_at", "finished_at", "created_at", "latency_s", "harness_s", "queued_s",
            "run_in_flight", "overrides", "job"}
RAY_ENV = {**os.environ, "RAY_AUTH_MODE": "disabled"}

# Run by a driver of its own (this process may hold another Ray): the cluster's live nodes, and
# for each agent worker the node it ran on.
PLACEMENT = """
import json, sys
import ray
from ray._private import state
ray.init(address=sys.argv[1], logging_level="ERROR")
nodes = [node["NodeID"] for node in ray.nodes() if node["Alive"]]
agents = [{"name": a["Name"], "node": a["Address"]["NodeID"]}
          for a in state.actors().values() if a["ActorClassName"] == "AgentWorker"]
print(json.dumps({"nodes": nodes, "agents": agents}))
"""


def launch_ray_node(directory: Path, *options: str) -> subprocess.Popen[str]:
    """`ray start --block` in a session of its own. Two raylets on one machine need ports of their
    own: the dashboard agent's is fixed (52365) unless given, workers' come from the OS."""
    command = [sys.executable, "-m", "ray.scripts.scripts", "start", "--node-ip-address=127.0.0.1",
               "--num-cpus=1", "--block", f"--dashboard-agent-listen-port={free_port()}",
               "--min-worker-port=0", "--max-worker-port=0", *options]
    # A node's working directory is its own, as on a real cluster, not the driver's.
    return subprocess.Popen(command, cwd=directory, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True, env=RAY_ENV)


def wait_started(node: subprocess.Popen[str], timeout: float = 120) -> None:
    """Until `ray start` says the node is up; its output if it ends or hangs first."""
    seen: list[str] = []

    def read() -> None:
        assert node.stdout is not None
        for line in node.stdout:  # the rest stays in the pipe: `ray start --block` says little more
            seen.append(line)
            if "Ray runtime started" in line:
                return

    reader = threading.Thread(target=read, daemon=True)  # ends at the latest when the node is stopped
    reader.start()
    reader.join(timeout)
    if not any("Ray runtime started" in line for line in seen):
        raise AssertionError(f"{' '.join(map(str, node.args))} did not start:\n{''.join(seen)[-3000:]}")


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
@tiers.starts_processes
def local_sweep(tmp_path_factory):
    """The same agent runs in one run on a Ray of its own (`ray.address` null; one job is cheaper
    than a sweep of four and has the same run ids), started before the cluster so that the two
    overlap; `reference` waits for it."""
    directory = tmp_path_factory.mktemp("local") / "run"
    log = open(directory.parent / "output.log", "w+")  # noqa: SIM115 (read back by `reference`)
    seeds = f"seeds=[{','.join(map(str, SEEDS))}]"
    process = subprocess.Popen([sys.executable, "-m", "harness", *SETTINGS, seeds, "ray.address=null",
                                f"hydra.run.dir={directory}"], cwd=ROOT, stdout=log,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    yield process, directory, log
    stop_session(process)
    log.close()


@pytest.fixture(scope="module")
@tiers.starts_processes
def cluster(local_sweep, tmp_path_factory):
    """A head node and a second node with one CPU each, stopped by their sessions afterwards."""
    port = free_port()
    nodes = []
    try:
        # Its own dashboard port: without the dashboard, `ray start` still binds one, and the
        # default (8265) may belong to another run on this machine.
        nodes.append(launch_ray_node(tmp_path_factory.mktemp("head"), "--head", f"--port={port}",
                                     "--include-dashboard=false", f"--dashboard-port={free_port()}",
                                     "--disable-usage-stats",
                                     f"--temp-dir={short_temp_dir()}"))
        # The second node joins as soon as the head's GCS answers. It shares the head's temp dir,
        # whose logs the head's log monitor already forwards (a second would print them twice).
        wait_for(lambda: listening(port) or nodes[0].poll() is not None, 120, "the head's GCS")
        nodes.append(launch_ray_node(tmp_path_factory.mktemp("node"), f"--address=127.0.0.1:{port}",
                                     "--include-log-monitor=false"))
        for node in nodes:
            wait_started(node)
        yield f"127.0.0.1:{port}"
    finally:
        for node in reversed(nodes):
            stop_session(node)  # every process `ray start` started is in the session it was given


@pytest.fixture(scope="module")
@tiers.starts_processes
def cluster_sweep(cluster, tmp_path_factory):
    directory = tmp_path_factory.mktemp("cluster") / "sweep"
    result = run_cli(*SWEEP, f"ray.address={cluster}", f"hydra.sweep.dir={directory}", timeout=240)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    return result, directory


@pytest.fixture(scope="module")
def reference(local_sweep):
    process, directory, log = local_sweep
    returncode = process.wait(timeout=240)
    log.seek(0)
    assert returncode == 0, log.read()[-3000:]
    return directory


def job_dirs(sweep: Path) -> list[Path]:
    return [sweep / str(job) for job in range(len(SEEDS))]  # job n is seed SEEDS[n]


def rows(*jobs: Path) -> dict[str, list[dict]]:
    """Every table of these jobs, without the columns that legitimately differ, in a stable order."""
    found: dict[str, list[dict]] = {}
    for job in jobs:
        for table in json.loads((job / "manifest.json").read_text())["tables"]:
            records = ds.dataset(job / table).to_table().to_pylist() if (job / table).is_dir() else []
            found.setdefault(table, []).extend({k: v for k, v in r.items() if k not in VOLATILE}
                                               for r in records)
    return {table: sorted(records, key=lambda r: json.dumps(r, sort_keys=True, default=str))
            for table, records in found.items()}


def test_the_sweep_attaches_to_both_nodes_and_every_job_completes(cluster, cluster_sweep):
    result, sweep = cluster_sweep
    assert f"attached to the Ray cluster at {cluster} (" in result.stdout and ", 2 nodes)" in result.stdout
    assert (sweep / "multirun.yaml").exists()
    for job, seed in zip(job_dirs(sweep), SEEDS, strict=True):
        manifest = json.loads((job / "manifest.json").read_text())
        assert manifest["status"] == "finished", (job, manifest["error"])
        assert [(r["seed"], r["episodes"]) for r in manifest["agent_runs"]] == [(seed, NUM_TASKS)]
        assert manifest["tables"]["episodes"] == NUM_TASKS
        episodes = ds.dataset(job / "episodes").to_table().to_pylist()
        assert sorted(e["stream_position"] for e in episodes) == list(range(NUM_TASKS))
        assert {e["seed"] for e in episodes} == {seed} and all(e["error"] is None for e in episodes)
        calls = ds.dataset(job / "llm_calls").to_table().to_pylist()
        assert len(calls) >= NUM_TASKS and all(c["error"] is None for c in calls)


def test_its_rows_are_those_of_the_same_runs_on_one_node(cluster_sweep, reference):
    _, sweep = cluster_sweep
    cluster_rows, local_rows = rows(*job_dirs(sweep)), rows(reference)
    assert set(cluster_rows) == set(local_rows)
    assert len(cluster_rows["episodes"]) == len(SEEDS) * NUM_TASKS and cluster_rows["llm_calls"]
    for table in local_rows:
        assert cluster_rows[table] == local_rows[table], f"{table} differs"


def test_the_sweeps_pool_of_agent_workers_ran_on_both_nodes(cluster, cluster_sweep):
    query = subprocess.run([sys.executable, "-c", PLACEMENT, cluster], capture_output=True, text=True,
                           timeout=120, env=RAY_ENV)
    assert query.returncode == 0, query.stderr[-3000:]
    placement = json.loads(query.stdout.strip().splitlines()[-1])
    nodes = placement["nodes"]
    assert len(nodes) == 2
    agents = placement["agents"]  # this cluster ran only this sweep: one pool, one worker per CPU
    assert len(agents) == 2, agents
    ran = " and ".join(f"{sum(a['node'] == node for a in agents)} on node {node[:8]}" for node in nodes)
    assert {a["node"] for a in agents} == set(nodes), f"the agent workers ran {ran}"
