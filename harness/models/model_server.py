"""The local model server: llama-cpp-python's OpenAI-compatible server on 127.0.0.1.

Started on a free port before the run, waited for, and stopped when the run ends, whether it ends
normally, on an error or on Ctrl-C. If the process that started it dies without stopping it (kill
-9, a crash), the kernel kills the server too (PR_SET_PDEATHSIG), so nothing is left listening. Its
output goes to a log file in the run directory, which the error names if the server cannot start.
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from harness.config import LocalServer


class ModelServerError(RuntimeError):
    pass


SERVER_FLAGS = ("--logits_all", "false")
"""llama-cpp-python's server defaults to logits for every prompt token, which only `logprobs` needs:
an n_ctx x vocabulary float buffer (up to ~400 MB for SmolLM2 at n_ctx 2048) and the output layer
run on the whole prompt. Without them the replies are the same greedy replies token for token, with
less memory and less work per prompt. A call that asks for `logprobs` gets an error from this server."""


def model_file(settings: LocalServer) -> Path:
    spec = importlib.util.find_spec(settings.package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelServerError(f"model package {settings.package!r} is not installed "
                               f"(pip install {settings.package.replace('_', '-')})")
    path = Path(next(iter(spec.submodule_search_locations))) / settings.file
    if not path.is_file():
        raise ModelServerError(f"model file {settings.file!r} not found in package {settings.package!r}")
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LocalModelServer:
    """Context manager: `with LocalModelServer(settings, log) as server: server.api_base`."""

    def __init__(self, settings: LocalServer, log_path: Path) -> None:
        self.settings = settings
        self.log_path = log_path
        self.port = free_port()
        self.api_base = f"http://127.0.0.1:{self.port}/v1"
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> LocalModelServer:
        path = model_file(self.settings)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "harness.models.adapter_server", "--model", str(path),
                   "--model_alias", self.settings.alias, "--host", "127.0.0.1",
                   "--port", str(self.port), "--n_threads", str(self.settings.n_threads),
                   "--n_ctx", str(self.settings.n_ctx), *SERVER_FLAGS]
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent())
        self._wait_until_ready()
        return self

    def _wait_until_ready(self) -> None:
        assert self._process is not None
        deadline = time.monotonic() + self.settings.startup_timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise ModelServerError(f"local model server exited with code {self._process.returncode} "
                                       f"during start-up; see {self.log_path}")
            try:
                with urllib.request.urlopen(f"{self.api_base}/models", timeout=1) as reply:
                    served = [m["id"] for m in json.load(reply)["data"]]
                if self.settings.alias in served:
                    return
            except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
                pass
            time.sleep(0.2)
        self.stop()
        raise ModelServerError(f"local model server not ready after {self.settings.startup_timeout_s:g} s; "
                               f"see {self.log_path}")

    def exit_code(self) -> int | None:
        """The server's exit code once it has died; None while it runs (or was never started)."""
        return self._process.poll() if self._process is not None else None

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def __enter__(self) -> LocalModelServer:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()


PR_SET_PDEATHSIG = 1


def _die_with_parent() -> Callable[[], None] | None:
    """A pre-exec hook that has the kernel SIGKILL the child when its parent dies (Linux only).
    The kernel ties this to the thread that started the child: start servers from the main thread."""
    if not sys.platform.startswith("linux"):
        return None
    parent = os.getpid()

    def hook() -> None:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before the hook ran
            os.kill(os.getpid(), signal.SIGKILL)

    return hook
