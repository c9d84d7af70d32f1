"""What a learner run is planned with: how its weights are trained and served (`LearnerSpec`),
decided by the driver's plan (harness/agent_run/plan.py) and read by its trainer (`run_trainer`)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict


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
