"""What litellm knows of a model, asked before anything starts (harness/driver/preflight.py) and by the
gateway: whether litellm can route its name, whether its provider's key is set, whether it takes
tools natively, whether litellm's map has its price, whether its provider caches only a marked
prompt prefix, and which completion parameters litellm would refuse to send it.
"""

from __future__ import annotations

import os
from typing import Any

from harness.config import ConfigError, EndpointSettings
from harness.errors import one_line
from harness.models.direct import PROVIDER as DIRECT_PROVIDER
from harness.models.lazy_litellm import in_process, load_litellm


def supports_function_calling(model: str) -> bool:
    """Whether litellm's model map says the model takes tools natively; a model it does not know
    takes them through the text protocol, which works with any."""
    try:
        return bool(load_litellm().supports_function_calling(model=model))
    except Exception:
        return False


def knows_price(model: str) -> bool:
    """Whether litellm's price map has the model's input price."""
    try:
        return load_litellm().get_model_info(model).get("input_cost_per_token") is not None
    except Exception:
        return False


def marks_cache(model: str) -> bool:
    """Whether the provider caches a prompt prefix only where the prompt marks it (Anthropic's
    `cache_control`, also behind Bedrock and Vertex): OpenAI-style providers cache by themselves."""
    try:
        name, provider, _, _ = load_litellm().get_llm_provider(model)
    except Exception:
        return False
    return provider == "anthropic" or (provider in ("bedrock", "vertex_ai") and "claude" in name)


def refused_params(model: str, params: dict[str, Any]) -> dict[str, str]:
    """The OpenAI-style completion parameters litellm would refuse to send to this model (a
    reasoning model's temperature 0, say), each with litellm's reason; none when it takes them
    together. It maps those it can (e.g. max_tokens to max_completion_tokens) itself;
    provider-specific keys go as they are."""
    litellm = load_litellm()
    try:
        name, provider, _, _ = litellm.get_llm_provider(model)
    except Exception:  # check_model_name says what is wrong with the name
        return {}

    def refusal(candidate: dict[str, Any]) -> str | None:
        try:
            litellm.utils.get_optional_params(model=name, custom_llm_provider=provider, **candidate)
        except litellm.UnsupportedParamsError as error:
            return one_line(str(error), 200).removeprefix("litellm.UnsupportedParamsError: ")
        return None

    standard = {key: value for key, value in params.items() if key in litellm.OPENAI_CHAT_COMPLETION_PARAMS}
    if refusal(standard) is None:
        return {}
    each = {key: refusal({key: value}) for key, value in standard.items()}
    return {key: reason for key, reason in each.items() if reason is not None}


def check_model_name(name: str, field: str = "model.name") -> None:
    """Reject a model string litellm cannot route, before anything starts."""
    if in_process(name):
        return
    try:
        load_litellm().get_llm_provider(name)
    except Exception as error:
        raise ConfigError(f"invalid config: {field}: litellm cannot route {name!r} "
                          f"(unknown provider; expected e.g. openai/gpt-4o-mini): "
                          f"{one_line(error)}") from None


def keys_in_environment(model: str, api_base: str | None = None) -> bool:
    """Whether the key the model's provider needs is set (litellm's check)."""
    if model.startswith(f"{DIRECT_PROVIDER}/"):
        return "OPENAI_API_KEY" in os.environ  # litellm's check for openai, without litellm (a test holds it)
    try:
        check = load_litellm().validate_environment(model=model, api_base=api_base)
        return bool(check["keys_in_environment"])
    except Exception:  # a provider litellm cannot check: let the call say what is missing
        return True


def check_credentials(settings: EndpointSettings, field: str) -> None:
    """Refuse, before anything starts, a model whose provider needs a key that is not set. A model
    behind `api_base` (a server of the user's own: vLLM, SGLang, llama.cpp) needs none."""
    if settings.api_base or in_process(settings.name):
        return
    check = load_litellm().validate_environment(model=settings.name)
    if not check.get("keys_in_environment", True):
        missing = ", ".join(check.get("missing_keys") or ["its API key"])
        raise ConfigError(f"invalid config: {field}: {settings.name} needs {missing}, which is not set; "
                          f"export it, or point {field.rsplit('.', 1)[0]}.api_base at a server that "
                          "needs no key")
