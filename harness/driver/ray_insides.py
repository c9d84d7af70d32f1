"""Every use of Ray's private insides (`ray._private`, `ray._raylet`), in one module: what the harness
needs of Ray that no public API of Ray gives. Nothing else in harness/ or hydra_plugins/ reaches into
them (tests/test_structure.py holds that). Each use holds for the Ray that pyproject.toml pins
(`SUPPORTED`); tests/driver/test_ray_insides.py checks that what each relies on is still there and
behaves so, and names the installed version where it is not. Where Ray gains a public way, the use
moves out of here.

- A local Ray started without two of its start's waits (`LocalStart`, used by harness/driver/session.py
  `start_local_ray`): for the length of one `ray.init`, Ray's `RayParams` with defaults of the
  harness's (the dashboard agent on a free port; without the dashboard, no autoscaler monitor) and its
  `Node.start_api_server` run from a thread beside the raylet. `ray.init` takes neither option. Its
  Ray config (harness/driver/startup.py `LOCAL_RAY_SYSTEM_CONFIG`) goes in through ray.init's hidden
  option `_system_config`, "unstable", Ray's docstring says, and changed by Ray as it starts.
- That Ray's dashboard address once its dashboard has started (`dashboard_address`): the context
  `ray.init` returns was made before it had one.
- The processes Ray started for a node (`node_processes`): Ray keeps them on its node object alone.
- A Ray of this process's own ended without `ray.shutdown`'s stop of one process after another
  (`forget_node`): the driver disconnects, the caller kills the processes all at once.
- A cluster's GCS asked whether it wants Ray's token (`reach_gcs`, `token_at_hand`), and the token
  turned on in this process (`enable_token_auth`): Ray 2.60 has no public call for either.

Public APIs serve the rest: the session directory is `ray.get_runtime_context()`'s temp dir joined
with its session name (harness/bench/meter.py), the GCS address its `gcs_address`.
"""

from __future__ import annotations

import threading
from typing import Any

import ray
from ray._private import node as ray_node
from ray._private import parameter, services, worker
from ray._private.authentication import authentication_token_setup
from ray._raylet import AuthenticationTokenLoader, GcsClient

SUPPORTED = "ray[default]>=2.60,<2.61"
"""The Ray this module is written for: pyproject.toml's pin (tests/driver/test_ray_insides.py holds
the two equal, so a new pin means checking this module again)."""


class LocalStart:
    """One `ray.init(address="local")` (`init`) started without two of its waits
    (harness/driver/session.py `_start_local_ray_once` says why): the dashboard agent on a port the OS
    picks, and Ray's `Node.start_api_server` run from a thread of its own, which lives until `kept`
    is set, its failure kept for the caller to raise; with include_dashboard=false, neither the API
    server nor the autoscaler's monitor started at all."""

    def __init__(self) -> None:
        self.started, self.kept = threading.Event(), threading.Event()
        self.failures: list[BaseException] = []
        self.nodes: list[Any] = []
        """The nodes Ray started: their processes are ended where its start fails (`node_processes`)."""

    def init(self, **options: Any) -> Any:
        """`ray.init(address="local", **options)`, with Ray's `RayParams` and `Node.start_api_server`
        replaced process-wide for its length. `options["_system_config"]` (one of ray.init's hidden
        options, Ray's config overridden) is handed over as a copy: Ray adds this session's spilling
        directory to the dict it is given."""
        if "_system_config" in options:
            options = {**options, "_system_config": dict(options["_system_config"])}
        fixed, in_turn = parameter.RayParams, ray_node.Node.start_api_server

        class RayParams(fixed):  # type: ignore[misc,valid-type]
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                kwargs.setdefault("dashboard_agent_listen_port", 0)  # 0: Ray picks a free one
                kwargs.setdefault("no_monitor", kwargs.get("include_dashboard") is False)
                super().__init__(*args, **kwargs)

        def start_api_server(node: Any, **arguments: Any) -> None:  # a function: bound to the node
            self._start_api_server(in_turn, node, **arguments)

        parameter.RayParams, ray_node.Node.start_api_server = RayParams, start_api_server
        try:
            return ray.init(address="local", **options)
        finally:
            parameter.RayParams, ray_node.Node.start_api_server = fixed, in_turn

    def _start_api_server(self, in_turn: Any, node: Any, **arguments: Any) -> None:
        self.nodes.append(node)
        if arguments.get("include_dashboard") is False:
            self.started.set()
            return

        def start() -> None:
            try:
                in_turn(node, **arguments)
            except BaseException as failure:  # raised where the start is waited for
                self.failures.append(failure)
            self.started.set()
            self.kept.wait()

        threading.Thread(target=start, name="ray dashboard", daemon=True).start()


def dashboard_address() -> str:
    """host:port of the dashboard of the Ray this process started ("" without one), once started."""
    return worker._global_node.webui_url or ""


def node_processes(node: Any = None) -> list[Any]:
    """The `subprocess.Popen` of every process Ray started for `node` (a node of `LocalStart.nodes`),
    or for the node of the Ray this process started (none where it started none, or has ended it)."""
    if node is None:
        node = getattr(worker, "_global_node", None)
    if node is None:
        return []
    return [info.process for infos in node.all_processes.values() for info in infos
            if getattr(info, "process", None) is not None]


def forget_node() -> None:
    """Of the Ray this process started: the objects it spilled to disk removed, and its node forgotten,
    so that `ray.shutdown` disconnects the driver only and leaves its processes to the caller."""
    node = worker._global_node
    if node is not None:
        if node.is_head():
            node.destroy_external_storage()
        worker._global_node = None


def reach_gcs(address: str) -> None:
    """Connect to the GCS at `address` (as `ray.init` takes it) and let go: `ray.exceptions.
    AuthenticationError` where it wants Ray's token and this process sends none, another error where
    no GCS answers there."""
    GcsClient(address=services.canonicalize_bootstrap_address_or_die(address))


def token_at_hand() -> bool:
    """Whether Ray finds a token here (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH, ~/.ray/auth_token), whatever
    this process's RAY_AUTH_MODE."""
    return bool(AuthenticationTokenLoader.instance().has_token(ignore_auth_mode=True))


def enable_token_auth() -> None:
    """RAY_AUTH_MODE=token in this process, and Ray's config reloaded to send the token."""
    authentication_token_setup._enable_token_auth()

