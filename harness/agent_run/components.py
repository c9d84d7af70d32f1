"""The config's components (`_target_` + options) made into objects, with a bad target or option
reported in one line; and the models a job's runs call."""

from __future__ import annotations

from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import instantiate

from envs.base import Environment
from harness.agent_run.identity import agent_needs
from harness.config import ConfigError, EndpointSettings, HarnessConfig


def instantiate_component(cfg: dict[str, Any], field: str, expected: type, **kwargs: Any) -> Any:
    """`hydra.utils.instantiate`, with a bad target or option reported as a one-line ConfigError.
    `kwargs` are runtime objects passed to the constructor as they are (Hydra would turn a
    dataclass into a config)."""
    try:
        component = instantiate(cfg, _convert_="all", _partial_=True)(**kwargs)
    except InstantiationException as error:
        cause = error.__cause__ or error
        message = " ".join(f"{type(cause).__name__}: {cause}".split())
        raise ConfigError(f"invalid config: {field}: {message}") from None
    except (TypeError, ValueError) as error:  # the constructor refused an option
        message = " ".join(f"{type(error).__name__}: {error}".split())
        raise ConfigError(f"invalid config: {field}: {message}") from None
    if not isinstance(component, expected):
        raise ConfigError(f"invalid config: {field}._target_: {cfg['_target_']} is not a {expected.__name__}")
    return component


def models_in_use(settings: HarnessConfig) -> list[EndpointSettings]:
    """The models a job's runs call: its model, and its embedder where its variant embeds."""
    return [settings.model, *([settings.embedder] if agent_needs(settings.variant).embedder else [])]


def build_environment(env_cfg: dict[str, Any]) -> Environment:
    return instantiate_component(env_cfg, "env", Environment)
