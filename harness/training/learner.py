"""What a learner run is planned with: how its weights are trained and served (`LearnerSpec`),
decided from the settings here (`learner_spec`, when the job's plan finds that the variant's agent
learns in the model's weights: harness/agent_run/identity.py) and read by its trainer (`run_trainer`)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from harness.config import ConfigError, HarnessConfig


class LearnerSpec(BaseModel):
    """How a learner run's weights are trained and served (harness/training/run_trainer.py)."""

    model_config = ConfigDict(frozen=True)

    backend: Literal["transformers", "scripted"]
    base: str
    """What the adapters are trained on: the base GGUF file, or the scripted model's name."""
    gguf: str | None = None
    """The base model's GGUF file (the transformers backend)."""
    train_price: float = 0.0
    """Dollars per token trained (model.price.train_per_token)."""
    parameters: int | None = None
    """model.parameters: the FLOPs of the scripted trainer."""


def learner_spec(settings: HarnessConfig) -> LearnerSpec:
    """How the weights of a variant that learns in them are trained and served on this model. A model
    whose weights the harness cannot load is refused in one line, as is a missing train extra."""
    model = settings.model
    local = model.local_server if model.serves_locally else None
    price = local.price if local is not None else model.price
    train_price = price.train_per_token if price is not None else 0.0
    if model.is_scripted:
        return LearnerSpec(backend="scripted", base=model.name, train_price=train_price,
                           parameters=model.parameters)
    if local is None and not (model.api_base and model.weights):
        raise ConfigError(f"invalid config: variant={settings.variant.name} learns in the model's weights, "
                          f"and the harness cannot load the weights of {model.name}; learners run on "
                          "model=smollm2 (the local model), model=scripted (a scripted stand-in), or a "
                          "vLLM server's model.api_base with its model.weights (docs/weights.md)")
    from harness.models.model_server import ModelServerError, model_file
    from harness.training.needs import require

    require(f"variant={settings.variant.name}")
    if local is None:
        assert model.weights is not None
        if not Path(model.weights).expanduser().is_file():
            raise ConfigError(f"invalid config: model.weights: no GGUF file at {model.weights}")
        gguf = str(Path(model.weights).expanduser().resolve())
        return LearnerSpec(backend="transformers", base=gguf, gguf=gguf, train_price=train_price,
                           parameters=model.parameters)
    try:
        gguf = str(model_file(local))
    except ModelServerError as error:
        raise ConfigError(f"invalid config: model.local_server: {error}") from None
    return LearnerSpec(backend="transformers", base=f"{local.package}/{local.file}", gguf=gguf,
                       train_price=train_price, parameters=model.parameters)
