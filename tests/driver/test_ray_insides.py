"""What harness/driver/ray_insides.py relies on of Ray's insides still holds: each check fails naming
the installed Ray and the pin the module was written for, so that an upgrade that moves any of it says
so here, in seconds and without a Ray, rather than as a slower start, a Ray left running or a run that
cannot attach. tests/driver/test_local_ray.py starts Ray to see each of them at work."""

import inspect
import subprocess
import sys

import pytest
import ray
from ray._private import node, parameter, ray_constants, services, worker
from ray._private.authentication import authentication_token_setup
from ray._raylet import AuthenticationTokenLoader

from harness.driver import ray_insides
from harness.driver.ray_insides import SUPPORTED
from harness.driver.startup import LOCAL_RAY_SYSTEM_CONFIG
from tests.driver.insides import Insides

INSIDES = Insides("ray", ray.__version__, "harness/driver/ray_insides.py", SUPPORTED)
relied_on = INSIDES.relied_on


def test_the_module_is_written_for_the_pinned_ray_and_the_installed_one_is_it():
    INSIDES.check_pin()


def test_ray_init_builds_its_node_from_what_the_local_start_swaps():
    """`LocalStart.init` replaces `parameter.RayParams` and `Node.start_api_server` for one ray.init:
    ray.init must look both up where they are replaced, and hand RayParams the dashboard's switch."""
    starts = inspect.getsource(worker.init)
    relied_on("ray._private.parameter.RayParams(" in starts, "ray.init builds parameter.RayParams")
    relied_on("include_dashboard=include_dashboard" in starts, "ray.init hands RayParams include_dashboard")
    params = parameter.RayParams(include_dashboard=False, dashboard_agent_listen_port=0, no_monitor=True)
    relied_on((params.dashboard_agent_listen_port, params.no_monitor) == (0, True),
              "RayParams takes dashboard_agent_listen_port and no_monitor")
    relied_on(list(inspect.signature(node.Node.start_api_server).parameters)
              == ["self", "include_dashboard", "raise_on_failure"], "Node.start_api_server's arguments")
    head = inspect.getsource(node.Node.start_head_processes)
    relied_on("self.start_api_server(" in head and "self._ray_params.no_monitor" in head,
              "a head node starts its API server by the class's method, its monitor unless no_monitor")
    relied_on("_system_config" in inspect.getsource(worker.init), "ray.init takes _system_config")


def test_the_harness_ray_config_names_settings_ray_knows_with_the_defaults_it_was_measured_against():
    # Ray's defaults, read in a fresh interpreter: this one's Config holds the system config of any Ray
    # an earlier test of this worker started (the harness's own, which changes these two).
    fresh = subprocess.run([sys.executable, "-c", "from ray._raylet import Config; print("
                            "Config.raylet_client_connect_timeout_milliseconds(), "
                            "Config.raylet_client_num_connect_attempts())"],
                           capture_output=True, text=True, timeout=60, check=True).stdout.split()
    relied_on(fresh == ["1000", "10"],
              "the raylet's store connection is retried 10 times a second apart by default")
    relied_on(ray_constants.RAY_WORKER_NICENESS == "RAY_worker_niceness", "worker_niceness is a Ray setting")
    assert set(LOCAL_RAY_SYSTEM_CONFIG) == {"raylet_client_connect_timeout_milliseconds",
                                            "raylet_client_num_connect_attempts", "worker_niceness"}


def test_the_started_node_keeps_its_processes_and_its_dashboard_and_can_be_forgotten():
    relied_on(hasattr(worker, "_global_node"), "ray._private.worker._global_node is the driver's node")
    relied_on("self.all_processes" in inspect.getsource(node.Node.__init__)
              and "process" in services.ProcessInfo._fields,
              "a node keeps the ProcessInfo (.process) of what it started in all_processes")
    relied_on(isinstance(inspect.getattr_static(node.Node, "webui_url"), property), "Node.webui_url")
    relied_on(callable(node.Node.is_head) and callable(node.Node.destroy_external_storage),
              "Node.is_head and Node.destroy_external_storage")
    shutdown = inspect.getsource(worker.shutdown)
    relied_on("if _global_node is not None:" in shutdown and "kill_all_processes" in shutdown,
              "ray.shutdown stops the processes of the node in _global_node only")


def test_no_node_no_processes():
    if ray.is_initialized():
        pytest.skip("a Ray of this process's own is running")
    relied_on(ray_insides.node_processes() == [], "no driver's node: none of its processes")


def test_a_clusters_token_is_asked_for_as_the_harness_asks_for_it():
    canonical = inspect.signature(services.canonicalize_bootstrap_address_or_die)
    relied_on([p.name for p in canonical.parameters.values() if p.default is p.empty] == ["addr"],
              "services.canonicalize_bootstrap_address_or_die(address)")
    relied_on(isinstance(AuthenticationTokenLoader.instance().has_token(ignore_auth_mode=True), bool),
              "AuthenticationTokenLoader.instance().has_token(ignore_auth_mode=True)")
    relied_on(not inspect.signature(authentication_token_setup._enable_token_auth).parameters,
              "authentication_token_setup._enable_token_auth()")
    relied_on(hasattr(ray.exceptions, "AuthenticationError"), "ray.exceptions.AuthenticationError")


def test_the_actors_answer_the_dunders_the_pool_asks_them():
    """`__ray_ready__` (whether an actor is up: harness/driver/session.py, warm_pool.py) is no public
    API of Ray's; `__ray_call__` is a DeveloperAPI."""

    class Actor:
        pass

    actor_class = ray.remote(Actor)
    relied_on(hasattr(actor_class, "__ray_ready__") and hasattr(actor_class, "__ray_call__"),
              "an actor has __ray_ready__ and __ray_call__")
