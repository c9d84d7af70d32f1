"""Validation of the composed Hydra config, before anything starts.

Hydra composes `conf/`; this module turns the result into typed settings and rejects bad values
with one line naming the field (`ConfigError`). Defaults live in the yaml files, not here: every
field below is required unless absence has a meaning of its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator


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

    @model_validator(mode="after")
    def _absolute_paths(self) -> Component:
        """Options named `path` or `*_path`/`*_dir` are read from where the run was started, also by
        Ray workers that run elsewhere: make them absolute here, once."""
        for key, value in (self.model_extra or {}).items():
            if (key == "path" or key.endswith(("_path", "_dir"))) and isinstance(value, str) and value:
                self.model_extra[key] = str(Path(value).expanduser().resolve())  # type: ignore[index]
        return self


class Price(_Strict):
    input_per_token: float = Field(ge=0)
    output_per_token: float = Field(ge=0)


class LocalServer(_Strict):
    """A GGUF model served by llama-cpp-python's OpenAI-compatible server on 127.0.0.1."""

    package: str
    file: str
    alias: str
    n_ctx: int = Field(gt=0)
    n_threads: int = Field(gt=0)
    startup_timeout_s: float = Field(gt=0)
    price: Price


class Scripted(_Strict):
    """The deterministic test model (`scripted/...`)."""

    accuracy: float = Field(ge=0, le=1)
    latency_s: float = Field(ge=0)
    fail_rate: float = Field(ge=0, le=1)
    fail_attempts: int = Field(ge=0)


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


class EmbedderSettings(EndpointSettings):
    """The embedding model memory variants use (conf/embedder/)."""


class ModelSettings(EndpointSettings):
    """The chat model agents act, reflect, distil and judge with (conf/model/)."""

    params: dict[str, Any]
    local_server: LocalServer | None = None
    scripted: Scripted | None = None

    @property
    def is_scripted(self) -> bool:
        return self.name.startswith("scripted/")

    @property
    def serves_locally(self) -> bool:
        """True when the harness must start the local server: the model is the one it serves."""
        return (self.local_server is not None and self.api_base is None
                and self.name == f"openai/{self.local_server.alias}")

    @model_validator(mode="after")
    def _scripted_needs_settings(self) -> ModelSettings:
        if self.is_scripted and self.scripted is None:
            raise ValueError("a scripted/ model needs a `scripted` section (see conf/model/scripted.yaml)")
        return self


class StreamSettings(_Strict):
    scenario: str = Field(min_length=1)
    num_tasks: int = Field(gt=0)
    tuning_size: int = Field(ge=0)
    order_seeds: list[int] | None = Field(min_length=1)
    probe_every: int = Field(ge=0)
    probe_size: int = Field(gt=0)

    @field_validator("scenario")
    @classmethod
    def _known_scenario(cls, value: str) -> str:
        from harness.streams import SCENARIOS

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
    max_cost_usd: float | None = Field(gt=0)


class RaySettings(_Strict):
    address: str | None
    num_workers: int = Field(gt=0)
    include_dashboard: bool
    gateway: str | None
    """Name of a running gateway actor to share (the Ray launcher sets it for every job of a sweep)."""


class CacheSettings(_Strict):
    enabled: bool
    dir: str = Field(min_length=1)
    charge: bool


class OutputSettings(_Strict):
    flush_interval_s: float = Field(ge=0)


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

    @field_validator("seeds")
    @classmethod
    def _distinct_seeds(cls, value: list[int]) -> list[int]:
        if len(set(value)) != len(value):
            raise ValueError(f"seeds must be distinct, got {value}")
        return value

    @classmethod
    def from_dictconfig(cls, cfg: DictConfig) -> HarnessConfig:
        # Hydra's own section may hold values only known inside a running job (its output dir).
        data: dict[str, Any] = {}
        for key in cfg:
            if key != "hydra":
                node = cfg[key]
                is_node = OmegaConf.is_config(node)
                data[str(key)] = OmegaConf.to_container(node, resolve=True) if is_node else node
        return cls.validate_dict(data)

    @classmethod
    def validate_dict(cls, data: dict[str, Any]) -> HarnessConfig:
        try:
            return cls.model_validate(data)
        except ValidationError as error:
            raise ConfigError(_one_line(error)) from None


def _one_line(error: ValidationError) -> str:
    first = error.errors()[0]
    field = ".".join(str(part) for part in first["loc"]) or "config"
    message = first["msg"].removeprefix("Value error, ")
    got = f" (got {first['input']!r})" if "input" in first and not isinstance(first["input"], dict) else ""
    more = f" [and {error.error_count() - 1} more]" if error.error_count() > 1 else ""
    return f"invalid config: {field}: {message}{got}{more}"
