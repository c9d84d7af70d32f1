"""The preflight stage of a job: everything that can be checked is checked before any episode runs
(the agent's options and the cache directory in the driver; model access and parameters in a thread
of the driver while Ray and the pool start, or on a warm pool's worker, where litellm is loaded; a
check that needed litellm and passed is kept, so that a later command need not import it to know the
same). A run directory that already holds episodes is planned as a resume by harness/driver/resume.py.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
import threading
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path

from pydantic import TypeAdapter

from harness.agent_run.runner import build_agent
from harness.agent_run.spec import AgentRunSpec, CheckedParams
from harness.config import CacheSettings, ConfigError, EndpointSettings, HarnessConfig, ModelSettings
from harness.errors import one_line
from harness.files import write_text_atomically
from harness.models.model_client import AgentModelClient
from harness.models.param_map import PROVIDER, ParamMap
from harness.redact import SECRET_NAME, Redactor

SAMPLING_PROBE = {"temperature": 0.7, "seed": 1}
"""Parameters agents set per call (agents/base.py `sampling`), checked as the config's are."""


def check_models(settings: HarnessConfig) -> CheckedParams:
    """A model string litellm cannot route, a provider key that is not set, or a parameter the
    model refuses fails here in one line, not as a failed call per task; a default parameter the
    model refuses is dropped (and said). Imports litellm (seconds) where `needs_litellm` says so."""
    remote = [(model, field) for model, field in ((settings.model, "model.name"),
                                                 (settings.embedder, "embedder.name"))
              if not is_harness_served(model)]
    checked = CheckedParams(settings.model.requested_params)
    if remote:
        from harness.models.capabilities import check_credentials, check_model_name

        for model, field in remote:
            check_model_name(model.name, field)
            check_credentials(model, field)
        if settings.budget.max_cost_usd is not None:
            _check_priced(remote)
        if not is_harness_served(settings.model):
            checked = check_params(settings.model)
    function_calling = settings.model.function_calling
    if function_calling is None:
        from harness.models.capabilities import supports_function_calling

        function_calling = supports_function_calling(settings.model.name)
    return replace(checked, function_calling=function_calling, param_map=_lean_param_map(settings.model))


def needs_litellm(settings: HarnessConfig) -> bool:
    """Whether `check_models` imports litellm: a model the harness does not serve, a chat model on the
    lean path (its `ParamMap`), or one whose function calling litellm's map must say."""
    return (not (is_harness_served(settings.model) and is_harness_served(settings.embedder))
            or _on_the_lean_path(settings.model) or settings.model.function_calling is None)


def start_model_checks(settings: HarnessConfig) -> Future[CheckedParams]:
    """`check_models` in a thread of the driver, started now: where it imports litellm (seconds), that
    happens while Ray and the pool start, so no agent worker need import it for the lean path. A check
    that passed before with the same facts (`recall_checks`) is not run again. Its failure is raised
    where the result is asked for."""
    checks: Future[CheckedParams] = Future()

    def check() -> None:
        try:
            checked = check_models(settings)
        except BaseException as error:  # raised in the job's thread, as though checked there
            checks.set_exception(error)
            return
        remember_checks(settings, checked)
        checks.set_result(checked)

    remembered = recall_checks(settings)
    if remembered is not None:
        checks.set_result(remembered)
    elif needs_litellm(settings):
        threading.Thread(target=check, name="model checks", daemon=True).start()
    else:
        check()
    return checks


def checks_need_litellm(settings: HarnessConfig) -> bool:
    """Whether this job's model checks will import litellm in this process: they need it, and did not
    pass before with the same facts."""
    return needs_litellm(settings) and recall_checks(settings) is None


def recall_checks(settings: HarnessConfig) -> CheckedParams | None:
    """What `check_models` returned for these settings before, where it needed litellm and passed: it
    depends on nothing else than the facts of `_check_key` (litellm's version and settings, the
    harness's code, the models' settings), so a later command need not import litellm to know it.
    None where it is not kept (`cache.model_checks` null, never checked, unreadable)."""
    path = _check_path(settings)
    if path is None:
        return None
    try:
        return kept_form().validate_json(path.read_text())
    except (OSError, ValueError):  # pydantic's ValidationError is a ValueError
        return None  # not there, or not as written: checked again, and written anew


def remember_checks(settings: HarnessConfig, checked: CheckedParams) -> None:
    """Keep a passed check for `recall_checks`, written whole or not at all (commands share the
    directory); where it cannot be written, would not read back the same, or holds a secret's value
    (a parameter set to one), it is not kept."""
    path = _check_path(settings)
    text = kept_form().dump_json(checked).decode()
    if path is None or kept_form().validate_json(text) != checked:
        return
    if Redactor.from_environment(settings.output.secret_env)(text) != text:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomically(path, text)
    except OSError:
        pass  # only a later command's start is slower for it


def _check_path(settings: HarnessConfig) -> Path | None:
    if settings.cache.model_checks is None or not needs_litellm(settings):
        return None
    return Path(settings.cache.model_checks).expanduser() / f"{_check_key(settings)}.json"


def _check_key(settings: HarnessConfig) -> str:
    """A digest of all that `check_models` depends on: litellm's version and its settings in the
    environment (a secret's aside), the harness's code, the models' settings."""
    litellm_env = sorted((name, value) for name, value in os.environ.items()
                         if name.upper().startswith("LITELLM") and not SECRET_NAME.search(name))
    facts = {"litellm": _litellm_version(), "litellm_env": litellm_env, "code": _code_digest(),
             # Of a server's address the check needs only whether there is one: another port, the same.
             **{group: {**model.model_dump(mode="json"), "api_base": model.api_base is not None}
                for group, model in (("model", settings.model), ("embedder", settings.embedder))},
             "max_cost_usd": settings.budget.max_cost_usd}
    return hashlib.sha256(json.dumps(facts, sort_keys=True, default=str).encode()).hexdigest()[:32]


@functools.cache
def _litellm_version() -> str | None:
    from harness.driver.manifest import package_versions  # the driver's, with what a manifest records

    return package_versions(["litellm"])["litellm"]


@functools.cache
def _code_digest() -> str:
    """The harness's code that a check runs or reads: the config, this module, the models' modules, and
    the module of the form a passed check is kept in (`CheckedParams`)."""
    harness = Path(__file__).resolve().parents[1]
    files = [harness / "config.py", Path(__file__).resolve(), harness / "agent_run" / "spec.py",
             *sorted((harness / "models").glob("*.py"))]
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.name.encode() + b"\0" + file.read_bytes())
    return digest.hexdigest()


@functools.cache
def kept_form() -> TypeAdapter[CheckedParams]:
    """How a passed check is written (`remember_checks`) and read back (`recall_checks`)."""
    return TypeAdapter(CheckedParams)


def workers_need_litellm(models: Sequence[EndpointSettings]) -> bool:
    """Whether an agent worker calling these models imports litellm: any but a chat model on the lean
    path (the in-process providers are litellm's, embeddings go through it, other providers too)."""
    return any(not (isinstance(model, ModelSettings) and _on_the_lean_path(model)) for model in models)


def load_litellm_meanwhile() -> None:
    """Import litellm (seconds) in a thread of this process from now on, for model checks to come (a
    sweep's jobs', which start once its pool is up)."""

    def load() -> None:
        from harness.models.lazy_litellm import load_litellm

        load_litellm()

    threading.Thread(target=load, name="litellm", daemon=True).start()


def _on_the_lean_path(model: ModelSettings) -> bool:
    """Whether the gateway sends the model's calls itself (harness/models/direct.py): an `openai/`
    model behind a server (the user's, or the harness's own)."""
    return model.name.startswith(f"{PROVIDER}/") and bool(model.api_base or model.serves_locally)


def _lean_param_map(model: ModelSettings) -> ParamMap | None:
    if not _on_the_lean_path(model):
        return None
    from harness.models.param_map import param_map

    return param_map(model.name)


def _check_priced(models: list[tuple[EndpointSettings, str]]) -> None:
    """A dollar budget needs every call's cost: a model with no price would leave it uncounted."""
    from harness.models.capabilities import knows_price

    for model, field in models:
        if model.price is None and not knows_price(model.name):
            group = field.rsplit(".", 1)[0]
            raise ConfigError(f"invalid config: budget.max_cost_usd: litellm knows no price for "
                              f"{model.name}, so its calls could not be counted against a dollar budget; set "
                              f"{group}.price "
                              "({input_per_token: ..., output_per_token: ...}) or use budget.max_tokens")


def check_params(model: ModelSettings) -> CheckedParams:
    """Each completion parameter asked for, against what litellm says the model supports."""
    from harness.models.capabilities import marks_cache, refused_params

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
