"""Validation of the composed Hydra config, before anything starts.

Hydra composes `conf/`; this module turns the result into typed settings and rejects bad values
with one line naming the field (`ConfigError`). Defaults live in the yaml files, not here: every
field below is required unless absence has a meaning of its own.
"""

from __future__ import annotations

import errno
import hashlib
import json
import tempfile
from pathlib import Path
from typing import Annotated, Any, Literal

from omegaconf import DictConfig, OmegaConf
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
    with_config,
)
from pydantic_core import InitErrorDetails, PydanticCustomError
from typing_extensions import TypedDict  # pydantic validates typing.TypedDict only from Python 3.12

SCENARIOS = ("sequential", "interleaved", "isolated")
"""How an agent run's stream is made (harness/agent_run/streams.py): the names `stream.scenario` takes."""

class ConfigError(ValueError):
    """An invalid configuration value; the message is one line naming the field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Component(BaseModel):
    """A swappable component: `_target_` class plus its constructor's keyword arguments."""

    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)

    name: str = Field(min_length=1)
    target: str = Field(alias="_target_", min_length=1)

    def kwargs(self) -> dict[str, Any]:
        return dict(self.model_extra or {})

    def instantiable(self) -> dict[str, Any]:
        """The dict `hydra.utils.instantiate` takes: target and kwargs, without the name."""
        return {"_target_": self.target, **self.kwargs()}

    def declares(self, method: str, default: bool) -> bool:
        """What the target class's classmethod `method` says of these options (an agent's
        `uses_embedder`, `learns_weights`), read without building it; `default` where the target does
        not import (building it reports that, in one line) or has no such method."""
        from hydra.utils import get_class

        try:
            declared = getattr(get_class(self.target), method, None)
        except Exception:
            return default
        return bool(declared(self.kwargs())) if callable(declared) else default

    @model_validator(mode="after")
    def _absolute_paths(self) -> Component:
        """Options named `path` or `*_path`/`*_dir` (a string or a list of them) are read from where the
        run was started, also by Ray workers that run elsewhere: make them absolute here, once. A
        `path` that names nothing here and is not written as a path (`openai/gsm8k`) may be a remote
        name, a Hugging Face dataset's id (env=dataset): it is kept as written. One that cannot be
        resolved (an unknown `~user`, a symbolic link loop, a name too long) is refused, naming it."""
        problems: list[InitErrorDetails] = []
        for key, value in (self.model_extra or {}).items():
            if key == "path" or key.endswith(("_path", "_dir")):
                remote = key == "path"
                if isinstance(value, str) and value:
                    self.model_extra[key] = _absolute(value, remote, (key,), problems)  # type: ignore[index]
                elif isinstance(value, list) and all(isinstance(v, str) and v for v in value):
                    self.model_extra[key] = [  # type: ignore[index]
                        _absolute(v, remote, (key, index), problems) for index, v in enumerate(value)]
        if problems:
            raise ValidationError.from_exception_data(type(self).__name__, problems)
        return self


NAME_MAX = 255
"""Bytes a file name (one part of a path) may have on the file systems a run meets (ext4, XFS, APFS)."""


def _absolute(value: str, may_be_remote: bool, loc: tuple[str | int, ...],
              problems: list[InitErrorDetails]) -> str:
    """`value` made absolute; where it cannot be, the value as written and a problem naming why."""
    problem = _unresolvable(value)
    if problem is None:
        path = Path(value).expanduser()
        try:
            if may_be_remote and not path.exists() and not value.startswith(("/", "~", ".")):
                return value
            return str(path.resolve())
        except RuntimeError:  # Python < 3.13 reports a symbolic link loop so
            problem = "a symbolic link loop: it cannot be resolved"
        except OSError as error:
            problem = (f"{error.filename or value}: a symbolic link loop: it cannot be resolved"
                       if error.errno == errno.ELOOP else f"cannot be read ({error.strerror})")
    problems.append(InitErrorDetails(type=PydanticCustomError("path", problem), loc=loc, input=value))
    return value


def _unresolvable(value: str) -> str | None:
    """Why `value` cannot be a path before the file system is asked: an unknown `~user`, a name too
    long; None where nothing is seen."""
    if value.startswith("~"):
        user = value[1:].split("/", 1)[0]
        try:
            Path(value).expanduser()
        except RuntimeError:
            return f"~{user}: no such user (~ names a home dir)" if user else \
                "~: no home directory (HOME is not set)"
    longest = max(value.split("/"), key=lambda part: len(part.encode()))
    if len(longest.encode()) > NAME_MAX:
        return f"a name in it is {len(longest.encode())} bytes, over the {NAME_MAX} a file name may have"
    return None


class Price(_Strict):
    """Dollars per token; cached prompt tokens at their own price where the provider gives one."""

    input_per_token: float = Field(ge=0)
    output_per_token: float = Field(ge=0)
    cache_read_per_token: float | None = Field(default=None, ge=0)
    """Prompt tokens read from the provider's prompt cache; None: the input price."""
    cache_write_per_token: float | None = Field(default=None, ge=0)
    """Prompt tokens written to the provider's prompt cache; None: the input price."""
    train_per_token: float = Field(default=0.0, ge=0)
    """Tokens trained by a learner variant (harness/training/), each counted on every step it is
    passed in; 0 by default: a local model's training costs seconds and FLOPs, not dollars."""

    def cost(self, prompt_tokens: int, completion_tokens: int, cache_read_tokens: int = 0,
             cache_write_tokens: int = 0) -> float:
        """The dollars of one call: each kind of token at its price (cache reads and writes are
        part of the prompt tokens, as litellm counts them)."""
        read = self.input_per_token if self.cache_read_per_token is None else self.cache_read_per_token
        write = self.input_per_token if self.cache_write_per_token is None else self.cache_write_per_token
        uncached = prompt_tokens - cache_read_tokens - cache_write_tokens
        return (uncached * self.input_per_token + cache_read_tokens * read + cache_write_tokens * write
                + completion_tokens * self.output_per_token)


class LocalServer(_Strict):
    """A GGUF model served by llama-cpp-python's OpenAI-compatible server on 127.0.0.1."""

    package: str
    file: str
    alias: str
    n_ctx: int = Field(gt=0)
    n_threads: int = Field(gt=0)
    startup_timeout_s: float = Field(gt=0)
    price: Price


class ScriptedRule(_Strict):
    """A fixed reply of the scripted model: to calls of `purpose` (any, if null) whose prompt
    contains `contains` (any, if null). Tests steer one purpose with it (a poisoned skill, a safety
    verdict) while the others keep the default policy."""

    purpose: str | None = None
    contains: str | None = None
    reply: str


class Scripted(_Strict):
    """The deterministic test model (`scripted/...`)."""

    accuracy: float = Field(ge=0, le=1)
    latency_s: float = Field(ge=0)
    fail_rate: float = Field(ge=0, le=1)
    fail_attempts: int = Field(ge=0)
    rules: list[ScriptedRule] = []
    """Checked in order before the default policy; the first that matches gives the reply."""
    prompt_cache_min_tokens: int | None = Field(default=None, gt=0)
    """Emulate a warm provider prompt cache: the system message is reported as read from cache
    (`cache_read_tokens`) when it has at least this many tokens; None: no cache."""


def _stop_words(value: Any) -> Any:
    if isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        return value
    raise ValueError("should be a string or a list of strings")


# Strict: YAML and Hydra's override grammar already type numbers, so a string here is a typo, and
# `true` is not 1.
_Int = Annotated[int, Field(strict=True)]
_Float = Annotated[float, Field(strict=True, allow_inf_nan=False)]
_Penalty = Annotated[_Float, Field(ge=-2, le=2)]


@with_config(ConfigDict(extra="allow"))
class CompletionParams(TypedDict, total=False):
    """The sampling parameters litellm takes under these (OpenAI) names, checked here so that a bad
    value stops the run instead of failing every call. Other keys go to the provider unchecked."""

    temperature: Annotated[_Float, Field(ge=0)]
    top_p: Annotated[_Float, Field(ge=0, le=1)]
    top_k: _Int
    max_tokens: Annotated[_Int, Field(gt=0)]
    max_completion_tokens: Annotated[_Int, Field(gt=0)]
    n: Annotated[_Int, Field(gt=0)]
    seed: _Int
    stop: Annotated[Any, AfterValidator(_stop_words)]
    presence_penalty: _Penalty
    frequency_penalty: _Penalty
    logprobs: Annotated[bool, Field(strict=True)]
    top_logprobs: Annotated[_Int, Field(ge=0, le=20)]


_SET_BY_HARNESS = {
    "model": "set it with model.name", "messages": "the agents write the messages",
    "api_base": "set it with model.api_base", "api_key": "keys come from the provider's environment variable",
    "timeout": "set it with model.timeout_s", "num_retries": "set it with model.max_retries",
    "stream": "the gateway reads whole replies"}
"""Completion arguments the gateway sets itself: in `model.params` they would clash with its own."""


class EndpointSettings(_Strict):
    """A model the gateway serves: where it is, how hard to push it, what it costs."""

    name: str = Field(min_length=1)
    api_base: str | None
    max_concurrency: int = Field(gt=0)
    requests_per_minute: int | None = Field(gt=0)
    max_retries: int = Field(ge=0)
    retry_backoff_s: float = Field(ge=0)
    timeout_s: float = Field(gt=0)
    price: Price | None
    parameters: int | None = Field(default=None, gt=0)
    """The model's parameter count, where known: a call's FLOPs (about 2 x parameters x tokens) are
    counted with it (llm_calls.flops), and budget.max_flops needs the acting model's."""

    @field_validator("api_base")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("should be an http:// or https:// URL, e.g. http://localhost:8080/v1")
        return value


def endpoint_key(settings: EndpointSettings) -> str:
    """Identifies a model together with all its settings: a gateway serves the same
    model name with different settings (scripted accuracy, price, retries) side by side."""
    dumped = json.dumps(settings.model_dump(mode="json"), sort_keys=True)
    return f"{settings.name}#{hashlib.sha256(dumped.encode()).hexdigest()[:10]}"


class EmbedderSettings(EndpointSettings):
    """The embedding model memory variants use (conf/embedder/)."""


class ModelSettings(EndpointSettings):
    """The chat model agents act, reflect, distil and judge with (conf/model/)."""

    params: CompletionParams
    """Sent with every call; agents may override some per call (a retry's temperature, a seed). A
    value the model refuses (litellm's check, before the run) is a config error."""
    default_params: CompletionParams = Field(default_factory=dict)  # type: ignore[assignment]
    """The harness's own choices (greedy decoding, a reply length), under `params`: one the model
    refuses (a reasoning model's temperature) is not sent, and the run says so once."""
    prompt_caching: Literal["auto", "off"] = "auto"
    """auto: the stable start of every prompt (the system message) carries the provider's cache
    marker where litellm supports one (Anthropic's `cache_control`); OpenAI-style providers cache
    a repeated prefix by themselves. off: no marker."""
    function_calling: bool | None
    """Native tool calls (litellm `tools`); false: the JSON-in-text protocol; None: litellm's map."""
    local_server: LocalServer | None = None
    scripted: Scripted | None = None
    weights: str | None = None
    """A GGUF file of the served model's weights, for learner variants on a server of the user's own
    at `api_base` that speaks vLLM's runtime LoRA API (`vllm serve ... --enable-lora` with
    VLLM_ALLOW_RUNTIME_LORA_UPDATING=True): their adapters are trained on these weights here and
    loaded there by path (docs/weights.md)."""

    @property
    def is_scripted(self) -> bool:
        return self.name.startswith("scripted/")

    @property
    def serves_locally(self) -> bool:
        """True when the harness must start the local server: the model is the one it serves."""
        return (self.local_server is not None and self.api_base is None
                and self.name == f"openai/{self.local_server.alias}")

    @property
    def requested_params(self) -> dict[str, Any]:
        """The completion parameters asked for: the harness's defaults under the user's."""
        return {**self.default_params, **self.params}

    @field_validator("params", "default_params", mode="before")
    @classmethod
    def _no_harness_arguments(cls, value: Any) -> Any:
        for key in value if isinstance(value, dict) else ():
            if key in _SET_BY_HARNESS:
                raise ValueError(f"{key!r} is set by the harness, not here ({_SET_BY_HARNESS[key]})")
        if isinstance(value, dict):  # null: not set (a key the group lists, so that it takes overrides)
            return {key: item for key, item in value.items() if item is not None}
        return value

    @model_validator(mode="after")
    def _scripted_needs_settings(self) -> ModelSettings:
        if self.is_scripted and self.scripted is None:
            raise ValueError("a scripted/ model needs a `scripted` section (see conf/model/scripted.yaml)")
        return self

    @model_validator(mode="after")
    def _group_settings_fit_the_model(self) -> ModelSettings:
        """A group's limits belong to its model: the local model's 48 tokens and one request at a
        time must not silently apply to an API model whose name was overridden."""
        local = self.local_server
        if local is not None and self.api_base is None and self.name != f"openai/{local.alias}":
            raise ValueError(f"model.name={self.name} is not the local model this group configures (its "
                             f"max_tokens {self.requested_params.get('max_tokens')}, max_concurrency "
                             f"{self.max_concurrency} fit openai/{local.alias}); use model=litellm "
                             f"model.name={self.name}")
        if self.scripted is not None and not self.is_scripted:
            raise ValueError(f"model.name={self.name} is not a scripted/ model but the group is "
                             f"conf/model/scripted.yaml; use model=litellm model.name={self.name}")
        return self


class StreamSettings(_Strict):
    scenario: str = Field(min_length=1)
    num_tasks: int | None = Field(gt=0)
    """None: the whole evaluation pool, at most `harness.agent_run.tasks.DEFAULT_NUM_TASKS`."""
    tuning_size: int | None = Field(ge=0)
    """None: a fifth of the pool, at most `harness.agent_run.tasks.DEFAULT_TUNING_SIZE`."""
    order_seeds: list[int] | None = Field(min_length=1)
    probe_every: int = Field(ge=0)
    probe_size: int = Field(gt=0)
    snapshot_every: int = Field(ge=0)
    repeats: int = Field(default=1, ge=1)
    """Times each agent run is run on the same tasks in the same order (the noise floor)."""
    feedback: Literal["outcome", "answer"] = "outcome"
    """What an agent learns after a task: `outcome`, whether each attempt succeeded; `answer`, also
    the task's reference answer, revealed after its final attempt (online supervised learning)."""

    @field_validator("scenario")
    @classmethod
    def _known_scenario(cls, value: str) -> str:
        if value not in SCENARIOS:
            raise ValueError(f"unknown scenario {value!r}; available: {', '.join(SCENARIOS)}")
        return value

    @field_validator("order_seeds")
    @classmethod
    def _distinct_orders(cls, value: list[int] | None) -> list[int] | None:
        if value is not None and len(set(value)) != len(value):
            raise ValueError(f"order seeds must be distinct, got {value}")
        return value


class BudgetSettings(_Strict):
    """Per agent run; null means no cap. Every purpose counts, not only acting."""

    max_tokens: int | None = Field(gt=0)
    """Tokens of every call, and the tokens a learner variant trained on."""
    max_cost_usd: float | None = Field(gt=0)
    """Dollars of every call, and of training at model.price.train_per_token."""
    max_flops: float | None = Field(default=None, gt=0)
    """Floating-point operations of inference (2 x parameters x tokens a call) and training (6 x
    parameters x tokens trained, harness/training/accounting.py) together: compute as one budget for
    in-context and in-weight learners alike. Needs model.parameters."""


class RaySettings(_Strict):
    address: str | None
    num_workers: int | None = Field(gt=0)
    """Agent workers of the pool (a sweep's jobs share one); None: one per CPU of the cluster."""
    include_dashboard: bool
    limits: str | None
    """Set by the Ray sweep launcher for every job of its sweep: the name of the sweep's pool (its model
    limits actor); the job then runs on that pool, driven by the launcher."""
    warm_pool: str = Field(default="outputs/warm_pool.json", min_length=1)
    """The warm pool's state file: `python -m harness.warm start` writes it, `address: warm` reads it."""

    @field_validator("address")
    @classmethod
    def _ray_address(cls, value: str | None) -> str | None:
        host, _, port = (value or "").rpartition(":")
        if value in (None, "auto", "local", "warm") or "://" in value or (host and port.isdigit()):
            return value
        raise ValueError('should be null, "auto", "local", "warm", "host:port" or "ray://host:port"')


class CacheSettings(_Strict):
    enabled: bool
    dir: str = Field(min_length=1)
    charge: bool
    model_checks: str | None = Field(default=None, min_length=1)
    """Where the model check keeps what it learnt from litellm about each model (harness/driver/preflight.py
    `recall_checks`); None: the check runs in full every time."""


class OutputSettings(_Strict):
    flush_interval_s: float = Field(ge=0)
    transcripts: bool
    """Keep every call's input messages and raw reply in the transcripts table."""
    secret_env: list[str]
    """Environment variables whose values are secret besides those named like keys (see harness.redact)."""


class HarnessConfig(_Strict):
    seed: int
    seeds: list[int] = Field(min_length=1)
    variant: Component
    env: Component
    stream: StreamSettings
    model: ModelSettings
    embedder: EmbedderSettings
    budget: BudgetSettings
    ray: RaySettings
    output: OutputSettings
    cache: CacheSettings
    progress: bool

    @field_validator("seeds", mode="before")
    @classmethod
    def _not_until_decided(cls, value: Any) -> Any:
        if value == "until_decided":  # a sweep's launcher gives each round's seeds (driver/until_decided.py)
            raise ValueError("until_decided needs a sweep of two or more jobs that differ in one parameter: "
                             "python -m harness -m variant=baseline,memory seeds=until_decided")
        return value

    @field_validator("seeds")
    @classmethod
    def _distinct_seeds(cls, value: list[int]) -> list[int]:
        if len(set(value)) != len(value):
            raise ValueError(f"seeds must be distinct, got {value}")
        return value

    @model_validator(mode="after")
    def _flops_need_parameters(self) -> HarnessConfig:
        if self.budget.max_flops is not None and self.model.parameters is None:
            raise ValueError("budget.max_flops needs model.parameters (the model's parameter count), "
                             "which a call's FLOPs are counted with")
        return self

    @classmethod
    def from_dictconfig(cls, cfg: DictConfig) -> HarnessConfig:
        # Hydra's own section may hold values only known inside a running job (its output dir).
        data: dict[str, Any] = {}
        for key in cfg:
            if key not in ("hydra", "sweep"):  # the sweep's own settings, read by its launcher
                node = cfg[key]
                is_node = OmegaConf.is_config(node)
                data[str(key)] = OmegaConf.to_container(node, resolve=True) if is_node else node
        return cls.validate_dict(data)

    @classmethod
    def validate_dict(cls, data: dict[str, Any]) -> HarnessConfig:
        try:
            return cls.model_validate(data)
        except ValidationError as error:
            raise ConfigError(_validation_message(error)) from None


def check_output_dir(field: str, directory: str) -> None:
    """Create a run's (or sweep's) output directory, as Hydra is about to; a path that cannot be one
    is a ConfigError naming `field` (hydra.run.dir, hydra.sweep.dir)."""
    path = Path(directory)
    blocker = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        what = "is a file, not a directory" if blocker.is_file() else "is not a directory"
        raise ConfigError(f"invalid config: {field}: {blocker} {what}")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigError(f"invalid config: {field}: cannot create {path} ({error.strerror})") from None
    try:
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as error:
        raise ConfigError(f"invalid config: {field}: cannot write in {path} ({error.strerror})") from None


def _validation_message(error: ValidationError) -> str:
    first = error.errors()[0]
    field = ".".join(str(part) for part in first["loc"]) or "config"
    message = first["msg"].removeprefix("Value error, ")
    got = f" (got {first['input']!r})" if "input" in first and not isinstance(first["input"], dict) else ""
    more = f" [and {error.error_count() - 1} more]" if error.error_count() > 1 else ""
    return f"invalid config: {field}: {message}{got}{more}"


CONF_DIR = Path(__file__).resolve().parents[1] / "conf"
"""The config groups Hydra composes a run from."""


def compose_conf(*overrides: str) -> DictConfig:
    """conf/ composed as `python -m harness` composes it, with `overrides`, where no Hydra app runs (an
    evaluation's env, the bench, a measurement)."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))
