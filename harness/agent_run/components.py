"""The config's components (`_target_` + options) made into objects, and what can be read of a
component's class without making one."""

from __future__ import annotations

from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import get_class, instantiate

from envs.base import Environment
from harness.config import Component, ConfigError, EndpointSettings, HarnessConfig


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


def uses_embedder(variant: Component) -> bool:
    """Whether the variant's agent calls the embedder (harness.agent_api.Agent.uses_embedder). A
    target that does not import says yes: building the agent reports it, in one line."""
    return variant.declares("uses_embedder", True)


def learns_weights(variant: Component) -> bool:
    """Whether the variant's agent trains the model's weights (harness.agent_api.Agent.learns_weights)."""
    return variant.declares("learns_weights", False)


def models_in_use(settings: HarnessConfig) -> list[EndpointSettings]:
    """The models a job's runs call: its model, and its embedder where its variant embeds."""
    return [settings.model, *([settings.embedder] if uses_embedder(settings.variant) else [])]


def build_environment(env_cfg: dict[str, Any]) -> Environment:
    return instantiate_component(env_cfg, "env", Environment)


def env_families(env: Component, scenario: str) -> Component:
    """`env` with its family option filled when left null: the env's defaults for this scenario."""
    try:
        env_class = get_class(env.target)
    except Exception:  # instantiating it says what is wrong, in one line
        return env
    option = getattr(env_class, "family_option", None)
    if option is None or env.kwargs().get(option) is not None:
        return env
    families = env_class.interleaved_families if scenario == "interleaved" else env_class.default_families
    return Component.model_validate({"name": env.name, "_target_": env.target, **env.kwargs(),
                                     option: list(families)})


def env_keeps_order(env: Component) -> bool:
    """Whether the env's pool is ordered (its `order_option` set, e.g. env=dataset's `order_by`):
    its streams keep that order instead of a seeded shuffle."""
    try:
        option = get_class(env.target).order_option
    except Exception:  # not an Environment: instantiating it says what is wrong, in one line
        return False
    return option is not None and env.kwargs().get(option) not in (None, "")
