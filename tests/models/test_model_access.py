"""A model that cannot be reached fails in seconds, with one line; a server of the user's own needs
no key; a run whose calls mostly failed says so and exits non-zero."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from harness.models.gateway import Gateway
from harness.models.model_client import CallRequest, ModelUnavailable
from tests import tiers
from tests.conftest import run_variant, scripted_settings
from tests.processes import QUIET, StartedCli, run_cli, stop_session

NO_KEYS = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}


class FakeServer:
    """An OpenAI-compatible chat endpoint on 127.0.0.1 that answers with `status`."""

    def __init__(self, status: int = 200) -> None:
        self.requests: list[dict] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.requests.append({"path": self.path, "auth": self.headers.get("Authorization"),
                                       "body": body})
                if status == 200:
                    payload = {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                               "choices": [{"index": 0, "finish_reason": "stop",
                                            "message": {"role": "assistant", "content": "Paris"}}],
                               "usage": {"prompt_tokens": 11, "completion_tokens": 1, "total_tokens": 12}}
                else:
                    payload = {"error": {"message": "Incorrect API key provided",
                                         "type": "invalid_request_error", "code": "invalid_api_key"}}
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.api_base = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def server(request) -> Iterator[FakeServer]:
    fake = FakeServer(getattr(request, "param", 200))
    yield fake
    fake.close()


def byo_settings(api_base: str):
    return scripted_settings("model=litellm", "model.name=openai/my-served-model",
                             f"model.api_base={api_base}", "model.max_retries=3",
                             "model.retry_backoff_s=0.01")


MISSING_KEYS = {"openai/gpt-4o-mini": "OPENAI_API_KEY",
                "anthropic/claude-3-5-haiku-20241022": "ANTHROPIC_API_KEY"}
MOSTLY_FAILING = ["model=scripted", "embedder=hashing", "model.scripted.fail_rate=1.0",
                  "model.scripted.fail_attempts=100", "model.max_retries=0", "stream.num_tasks=4",
                  "cache.enabled=false"]


@pytest.fixture(scope="module")
@tiers.starts_processes
def commands(tmp_path_factory) -> Iterator[dict[str, StartedCli]]:
    """The command-line runs of the tests below that need no server of their own, run side by side
    (each into a directory of its own), each started once the one before has its Ray: a test waits
    for its own."""
    root = tmp_path_factory.mktemp("commands")
    commands = {model: (root / model.replace("/", "-"), "model=litellm", f"model.name={model}", *QUIET)
                for model in MISSING_KEYS}
    commands["embedder"] = (root / "embedder", "model=scripted", "variant=memory", "embedder=litellm", *QUIET)
    commands["mostly failing"] = (root / "mostly-failing", *MOSTLY_FAILING, *QUIET)
    started = {}
    for name, (directory, *overrides) in commands.items():
        started[name] = StartedCli(directory, *overrides, env=None if name == "mostly failing" else NO_KEYS)
        started[name].wait_past_ray_start()
    yield started
    for command in started.values():
        stop_session(command.process)


@pytest.mark.parametrize("model, variable", MISSING_KEYS.items())
def test_a_missing_key_fails_in_one_line_before_any_episode_runs(commands, model, variable):
    # The check runs in a thread of the driver while Ray starts, so Ray has started, but nothing is
    # sent and nothing is written. Under load Ray may have had to start twice, which it says first.
    run = commands[model]  # model=litellm model.name=<model>, with no *_API_KEY set
    result = run.result(timeout=120)
    assert result.returncode == 2
    *before, last = result.stderr.strip().splitlines()
    assert last == (
        f"error: invalid config: model.name: {model} needs {variable}, which is not set; export it, or "
        "point model.api_base at a server that needs no key")
    assert all(line.startswith("harness: Ray's node did not register in time") for line in before), before
    assert not (run.run_dir / "manifest.json").exists() and not (run.run_dir / "episodes").exists()


def test_an_embedder_without_its_key_is_named(commands):
    result = commands["embedder"].result(timeout=120)  # variant=memory embedder=litellm, with no key set
    assert result.returncode == 2
    *before, last = result.stderr.strip().splitlines()  # under load, Ray's second start is said first
    assert last.startswith(
        "error: invalid config: embedder.name: openai/text-embedding-3-small needs OPENAI_API_KEY")
    assert all(line.startswith("harness: Ray's node did not register in time") for line in before), before


def test_a_server_of_your_own_needs_no_key(server, monkeypatch):
    for name in [k for k in os.environ if k.endswith("_API_KEY")]:
        monkeypatch.delenv(name)
    settings = byo_settings(server.api_base)
    gateway = Gateway([settings.model])
    request = CallRequest(model=settings.model.name, purpose="act", run_id="r", task_id="t", attempt=1,
                          messages=[{"role": "user", "content": "Capital of France?"}])
    result = asyncio.run(gateway.call(request))
    assert result.record.error is None and result.text == "Paris"
    assert result.record.prompt_tokens == 11 and result.record.usage_source == "provider"
    assert len(server.requests) == 1 and server.requests[0]["path"] == "/v1/chat/completions"


@pytest.mark.parametrize("server", [401], indirect=True)
def test_an_authentication_error_is_not_retried_and_stops_the_run(server):
    with pytest.raises(ModelUnavailable, match=r"the model openai/my-served-model cannot be used: "
                                                r"AuthenticationError"):
        run_variant("model=litellm", "model.name=openai/my-served-model",
                    f"model.api_base={server.api_base}", "model.max_retries=3", "model.retry_backoff_s=0.01",
                    "stream.num_tasks=5")
    assert len(server.requests) == 1  # no retry, and no second task


@pytest.mark.slow
@pytest.mark.parametrize("server", [401], indirect=True)
def test_the_cli_stops_on_a_rejected_key_with_one_line_and_a_resume_command(server, tmp_path):
    run_dir = tmp_path / "run"
    clock = time.monotonic()
    result = run_cli("model=litellm", "model.name=openai/my-served-model",
                     f"model.api_base={server.api_base}", "embedder=hashing", "stream.num_tasks=5",
                     "cache.enabled=false", *QUIET, f"hydra.run.dir={run_dir}", timeout=180)
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: the model openai/my-served-model cannot be used: AuthenticationError")
    assert "resume with: python -m harness" in last and f"hydra.run.dir={run_dir}" in last
    assert len(server.requests) <= 2  # one per agent worker at most, none retried
    assert time.monotonic() - clock < 90


def test_a_run_whose_calls_mostly_failed_says_so_and_exits_non_zero(commands):
    result = commands["mostly failing"].result(timeout=180)  # MOSTLY_FAILING: every call fails, none retried
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith(
        "error: 4 of 4 model calls failed (most often: RateLimitError:")
    assert "4 episodes in" in result.stdout  # the rows are kept and summarised all the same


@pytest.mark.slow
def test_a_server_nothing_answers_at_fails_before_anything_starts(tmp_path):
    from harness.models.model_server import free_port

    api_base = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    clock = time.monotonic()
    result = run_cli("model=litellm", "model.name=openai/my-model", f"model.api_base={api_base}", *QUIET,
                     f"hydra.run.dir={tmp_path / 'run'}", timeout=120, env=NO_KEYS)
    assert result.returncode == 2
    assert result.stderr.strip().startswith(
        f"error: invalid config: model.api_base: nothing answers at {api_base}")
    assert len(result.stderr.strip().splitlines()) == 1 and "Ray" not in result.stdout
    assert time.monotonic() - clock < 60
