"""`ray.address` null starts a Ray of the run's own, even while another cluster runs on the machine
(it could be another user's); an address attaches to that cluster. Either way the run says which."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

from harness.models.model_server import free_port
from tests import tiers
from tests.processes import QUIET, run_cli, short_temp_dir, stop_session

pytestmark = pytest.mark.slow

SCRIPTED = ["model=scripted", "embedder=hashing", "stream.num_tasks=3", "cache.enabled=false", *QUIET]


def start_head(temp, auth: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    """A `ray start --head` of this test's own (its session stopped by the caller), and its address."""
    port = free_port()
    command = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", f"--port={port}",
               "--node-ip-address=127.0.0.1", "--num-cpus=1", "--include-dashboard=false", "--block",
               # Ports of its own: the defaults (8265, 52365) may belong to another run on this machine.
               f"--dashboard-port={free_port()}", f"--dashboard-agent-listen-port={free_port()}",
               f"--temp-dir={temp}"]
    head = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, env={**os.environ, **auth})
    for line in head.stdout:
        if "Ray runtime started" in line or "ray start --address" in line:
            break
    return head, f"127.0.0.1:{port}"


@pytest.fixture(scope="module")
@tiers.starts_processes
def other_cluster():
    head, address = start_head(short_temp_dir(), {"RAY_AUTH_MODE": "disabled"})
    yield address
    stop_session(head)  # every process `ray start` started is in the session it was given


def test_null_starts_its_own_ray_even_when_another_cluster_runs(other_cluster, tmp_path):
    result = run_cli(*SCRIPTED, f"hydra.run.dir={tmp_path / 'run'}", timeout=180,
                     env={**os.environ, "RAY_ADDRESS": other_cluster})
    assert result.returncode == 0, result.stderr[-2000:]
    assert "started a local Ray for this run" in result.stdout
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["ray_address"] != other_cluster


def test_an_address_attaches_and_says_so(other_cluster, tmp_path):
    result = run_cli(*SCRIPTED, f"ray.address={other_cluster}", f"hydra.run.dir={tmp_path / 'run'}",
                     timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    port = other_cluster.rsplit(":", 1)[1]
    assert f"attached to the Ray cluster at {other_cluster} (" in result.stdout
    assert ", 1 node)" in result.stdout
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["ray_address"].endswith(f":{port}")
    assert (tmp_path / "run" / "episodes").is_dir()


def test_a_cluster_with_token_auth_is_attached_with_the_token_at_hand_and_refused_in_one_line_without(
        tmp_path):
    """A cluster may ask for Ray's token (`ray start` with RAY_AUTH_MODE=token, or with a token at hand),
    while the harness's own Ray runs without it: attaching, the harness sends the token where the
    cluster asks for one."""
    token = uuid.uuid4().hex
    # a short directory: Ray's socket paths under it must fit the 107 bytes of a Unix socket's name
    head, address = start_head(short_temp_dir(), {"RAY_AUTH_MODE": "token",
                                                                  "RAY_AUTH_TOKEN": token})
    try:
        user = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
        refused = run_cli(*SCRIPTED, f"ray.address={address}", f"hydra.run.dir={tmp_path / 'refused'}",
                          timeout=180, env={**user, "HOME": str(tmp_path)})  # no ~/.ray/auth_token
        assert refused.returncode != 0
        assert (f"error: could not attach to {address}: the cluster uses token authentication and no token "
                "is here") in refused.stderr.splitlines()[-1]
        assert not (tmp_path / "refused" / "episodes").exists()
        attached = run_cli(*SCRIPTED, f"ray.address={address}", f"hydra.run.dir={tmp_path / 'run'}",
                           timeout=180, env={**user, "RAY_AUTH_TOKEN": token})
        assert attached.returncode == 0, attached.stderr[-2000:]
        assert f"attached to the Ray cluster at {address} (" in attached.stdout
    finally:
        stop_session(head)
