"""A Ray this harness starts shares the machine with others (another run, the suite's own): its node
must not fight them for Ray's fixed ports."""

import json
import socket
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow


def test_a_second_ray_on_the_machine_gets_a_dashboard_agent_of_its_own():
    """Ray's default agent port (52365) taken by someone else: the agent of the Ray that
    `start_local_ray` starts still serves, on a port of its own (with the default it retries for
    seconds, then serves none: port -1)."""
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        holder.bind(("0.0.0.0", 52365))
        holder.listen()
    except OSError:
        pass  # taken already: by another Ray on this machine, which is the case under test
    try:
        script = textwrap.dedent("""
            import ray
            from harness.driver.session import start_local_ray
            start_local_ray(num_cpus=1, include_dashboard=False, logging_level="warning")
            print("agent port", ray._private.worker.global_worker.node.dashboard_agent_listen_port)
            ray.shutdown()
        """)
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    finally:
        holder.close()
    assert done.returncode == 0, done.stderr[-2000:]
    port = int(done.stdout.split("agent port", 1)[1].split()[0])
    assert port > 0 and port != 52365


def test_the_dashboard_started_beside_the_raylet_serves_until_the_ray_ends():
    """`start_local_ray` starts the dashboard from a thread of its own (Ray would wait for it before
    starting the raylet): Ray starts it to die with that thread, so the thread lives on until the Ray
    ends, and the dashboard answers for as long as the Ray runs."""
    script = textwrap.dedent("""
        import json, socket, time, urllib.request
        import ray
        from harness.driver.session import _end_ray, start_local_ray
        free = socket.socket()
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
        free.close()
        context = start_local_ray(num_cpus=1, include_dashboard=True, dashboard_host="127.0.0.1",
                                  dashboard_port=port, logging_level="warning")
        print("url", context.dashboard_url)
        time.sleep(2)  # the thread that started it has long returned to what it waits on
        with urllib.request.urlopen(f"http://{context.dashboard_url}/api/v0/nodes", timeout=30) as reply:
            print("nodes", json.loads(reply.read())["data"]["result"]["total"])
        _end_ray(ours=True)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "url 127.0.0.1:" in done.stdout and "nodes 1" in done.stdout, done.stdout


def test_a_node_that_timed_out_registering_is_ended_and_started_once_more():
    """Ray gives its node 30 s to register, whatever the options; on a loaded machine that has run out
    (the suite's parallel tests under CI). The processes the failed start left (Ray leaves them to a
    reaper that waits for the driver's exit) are ended, and a second start serves the run."""
    script = textwrap.dedent("""
        import psutil, ray
        from ray._private import node
        from harness.driver import signals
        from harness.driver.session import NODE_TIMED_OUT, _end_ray, start_local_ray
        first, as_started = [], node.Node.start_ray_processes

        def timing_out(self):
            as_started(self)
            if not first:  # the first start's raylet and agents run; then Ray's own 30 s are up
                first.extend((p, p.name()) for p in signals.ray_processes(self))
                raise Exception("The current " + NODE_TIMED_OUT + ". This could happen because ...")

        node.Node.start_ray_processes = timing_out
        start_local_ray(num_cpus=1, include_dashboard=False, logging_level="warning")
        print("answer", ray.get(ray.remote(lambda: 42).remote()))
        def alive(process):
            try:
                return process.status() != psutil.STATUS_ZOMBIE
            except psutil.Error:
                return False

        print("first", len(first), "raylet" in dict(first).values(), any(alive(p) for p, _ in first))
        _end_ray(ours=True)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "answer 42" in done.stdout, done.stdout
    assert "did not register in time" in done.stderr and "starting it once more" in done.stderr
    count, raylet, alive = done.stdout.split("first", 1)[1].split()[:3]
    assert int(count) >= 3 and raylet == "True" and alive == "False", done.stdout  # its GCS, raylet, ...


def test_the_raylet_of_a_local_ray_retries_its_object_store_within_a_tenth_of_a_second():
    """A store not yet listening when the raylet's object manager connects cost a second's retry in
    half the starts with Ray's default (harness/driver/startup.py): a command's Ray and the bench's
    floor are started with a retry every 100 ms, given up after the same 10 s; each Ray of a process
    with its own copy of the config, to which Ray adds its session's spilling directory."""
    script = textwrap.dedent("""
        import contextlib, json
        import ray
        from harness.config import RaySettings
        from harness.driver.session import ray_session
        settings = RaySettings(address=None, num_workers=1, include_dashboard=False, limits=None)
        for _ in range(2):  # a second Ray of the same process (a retried start, a warm pool's next)
            with ray_session(settings):
                node = ray._private.worker._global_node
                print("config", json.dumps(node._config), node.get_session_dir_path())
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    for line in [line for line in done.stdout.splitlines() if line.startswith("config ")]:
        config_text, session = line.removeprefix("config ").rsplit(" ", 1)
        config = json.loads(config_text)
        assert config["raylet_client_connect_timeout_milliseconds"] == 100
        assert config["raylet_client_num_connect_attempts"] * 100 == 10_000  # Ray's default: 10 x 1 s
        # Ray adds its session's spilling directory to the config it is given: never the one before's.
        assert session in config["object_spilling_config"], (session, config)
    assert "unstable API" not in done.stderr, done.stderr[-2000:]


@pytest.mark.parametrize("dashboard", [False, True])
def test_with_the_dashboard_off_neither_rays_api_server_nor_its_monitor_starts(dashboard):
    """What serves only the dashboard (Ray's API server, its autoscaler's monitor) starts with it and
    not without it; the raylet, its agents and the workers start either way."""
    script = textwrap.dedent(f"""
        import psutil
        from harness.driver.session import _end_ray, start_local_ray
        start_local_ray(num_cpus=1, include_dashboard={dashboard}, dashboard_host="127.0.0.1",
                        dashboard_port=0, logging_level="warning")
        for child in psutil.Process().children(recursive=True):
            print("process", " ".join(child.cmdline()))
        _end_ray(ours=True)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    commands = [line for line in done.stdout.splitlines() if line.startswith("process ")]
    assert any("raylet" in command for command in commands), commands
    assert any("dashboard/agent.py" in command for command in commands), commands
    assert any("dashboard/dashboard.py" in command for command in commands) == dashboard, commands
    assert any("autoscaler/_private/monitor.py" in command for command in commands) == dashboard, commands


def test_the_actors_of_a_local_ray_run_at_the_niceness_of_the_command_that_started_it():
    """Ray starts its workers at nice 15: beside anything at nice 0 the kernel gave the pool's actors
    36/1024 of its share, and beside 3 busy loops the pool took 352 s to start instead of 7
    (harness/driver/startup.py). An actor of the harness's Ray runs at the command's own niceness."""
    script = textwrap.dedent("""
        import os
        import ray
        from harness.config import RaySettings
        from harness.driver.session import ray_session
        settings = RaySettings(address=None, num_workers=1, include_dashboard=False, limits=None)
        with ray_session(settings):
            niceness = ray.get(ray.remote(num_cpus=0)(lambda: os.nice(0)).remote())
            print("niceness", os.nice(0), niceness)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    [line] = [line for line in done.stdout.splitlines() if line.startswith("niceness ")]
    command, actor = line.split()[1:]
    assert actor == command, done.stdout
