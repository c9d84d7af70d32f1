"""The preflight stage of a job: everything that can be checked is checked before any episode runs
(the agent's options and the cache directory in the driver; model access and parameters on a pool
worker, where litellm is loaded). A run directory that already holds episodes is planned as a resume
by harness/driver/resume.py.
"""

from __future__ import annotations

import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.agent_run.runner import build_agent
from harness.agent_run.spec import AgentRunSpec
from harness.config import CacheSettings, ConfigError, EndpointSettings, HarnessConfig, ModelSettings
from harness.errors import one_line
from harness.models.model_client import AgentModelClient

SAMPLING_PROBE = {"temperature": 0.7, "seed": 1}
"""Parameters agents set per call (agents/base.py `sampling`), checked as the config's are."""


@dataclass(frozen=True)
class CheckedParams:
    """The chat model's completion parameters as they will be sent, after the model check."""

    params: dict[str, Any]
    """Sent with every call (the manifest and the `runs` table record them)."""
    refused: tuple[str, ...] = ()
    """Parameters the model refuses: never sent, also when an agent sets one per call (a sampled
    retry's temperature on a reasoning model, which takes only its own)."""
    notes: tuple[str, ...] = ()
    """What was not sent and why, to say once."""
    mark_cache: bool = False
    """Mark the system message as the prompt's cacheable start (model.prompt_caching=auto, on a
    provider that caches only what is marked)."""


def check_models(settings: HarnessConfig) -> CheckedParams:
    """A model string litellm cannot route, a provider key that is not set, or a parameter the
    model refuses fails here in one line, not as a failed call per task; a default parameter the
    model refuses is dropped (and said)."""
    remote = [(model, field) for model, field in ((settings.model, "model.name"),
                                                 (settings.embedder, "embedder.name"))
              if not is_harness_served(model)]
    if not remote:
        return CheckedParams(settings.model.requested_params)
    from harness.models.gateway import check_credentials, check_model_name  # imports litellm (seconds)

    for model, field in remote:
        check_model_name(model.name, field)
        check_credentials(model, field)
    if settings.budget.max_cost_usd is not None:
        _check_priced(remote)
    if is_harness_served(settings.model):
        return CheckedParams(settings.model.requested_params)
    return check_params(settings.model)


def _check_priced(models: list[tuple[EndpointSettings, str]]) -> None:
    """A dollar budget needs every call's cost: a model with no price would leave it uncounted."""
    from harness.models.gateway import knows_price

    for model, field in models:
        if model.price is None and not knows_price(model.name):
            group = field.rsplit(".", 1)[0]
            raise ConfigError(f"invalid config: budget.max_cost_usd: litellm knows no price for "
                              f"{model.name}, so its calls could not be counted against a dollar budget; set "
                              f"{group}.price "
                              "({input_per_token: ..., output_per_token: ...}) or use budget.max_tokens")


def check_params(model: ModelSettings) -> CheckedParams:
    """Each completion parameter asked for, against what litellm says the model supports."""
    from harness.models.gateway import marks_cache, refused_params

    requested = model.requested_params
    refused = refused_params(model.name, requested)
    explicit = [key for key in refused if key in model.params]
    if explicit:
        key = explicit[0]
        raise ConfigError(f"invalid config: model.params.{key}: {model.name} refuses {key}="
                          f"{requested[key]!r} ({refused[key]}); remove it, or choose a value it takes")
    notes = [f"model {model.name}: the default {key}={requested[key]!r} is not sent: {reason}"
             for key, reason in refused.items()]
    sent = {key: value for key, value in requested.items() if key not in refused}
    # What agents set per call (a sampled retry's temperature and seed) the model may refuse too.
    per_call = {key: reason for key, reason in refused_params(model.name, SAMPLING_PROBE).items()
                if key not in refused}
    notes += [f"model {model.name}: an agent's per-call {key} is not sent: {reason}"
              for key, reason in per_call.items()]
    return CheckedParams(sent, (*refused, *per_call), tuple(notes),
                         mark_cache=model.prompt_caching == "auto" and marks_cache(model.name))


def check_servers_answer(settings: HarnessConfig) -> None:
    """A server of the user's own (`api_base`) that nothing answers at fails at once, in the driver,
    before Ray starts (no litellm needed)."""
    for model, field in ((settings.model, "model.api_base"), (settings.embedder, "embedder.api_base")):
        if model.api_base and not is_harness_served(model):
            _check_reachable(model.api_base, field)


def _check_reachable(api_base: str, field: str) -> None:
    """A server of the user's own that nothing answers at fails now, not after every task's retries.
    Any HTTP answer (even 401 or 404) means something listens: the calls will say the rest."""
    try:
        with urllib.request.urlopen(f"{api_base.rstrip('/')}/models", timeout=10):
            pass
    except urllib.error.HTTPError:
        return
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise ConfigError(f"invalid config: {field}: nothing answers at {api_base} ({reason}); start the "
                          "server first, or fix the address") from None


def is_harness_served(model: EndpointSettings) -> bool:
    """Served by the harness itself (its local server, the scripted model, a local embedder)."""
    if isinstance(model, ModelSettings) and (model.serves_locally or model.is_scripted):
        return True
    return model.name.split("/", 1)[0] in ("local", "hashing")


def check_agents_build(specs: list[AgentRunSpec]) -> None:
    """Build the agent once, unconnected, so that a bad variant option fails before anything starts."""
    spec = specs[0]
    build_agent(spec, AgentModelClient(gateway=None, model=spec.model, run_id=spec.run_id))  # type: ignore[arg-type]


def check_cache_writable(cache: CacheSettings) -> None:
    if not cache.enabled:
        return
    directory = Path(cache.dir).expanduser()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".probe-"):
            pass
    except OSError as error:
        raise ConfigError(f"invalid config: cache.dir: cannot write to {directory} ({one_line(error)}); "
                          "choose another directory or set cache.enabled=false") from None
