"""python -m harness.training.speed's generation timing: base and adapter alternate round by round (ABBA),
so that a change in the machine's load falls on both, and the medians and their ratio are reported."""

from __future__ import annotations

from pathlib import Path

from harness.training import speed
from harness.training.serving import Generated
from tests.training import tiny

pytestmark = tiny.needs_train()


class FakeLlama:
    """Decodes at 100 tokens/s without an adapter and 80 with one, and records the order it was used in."""

    def __init__(self) -> None:
        self.adapter: Path | None = None
        self.order: list[str] = []

    def use(self, adapter: Path | None) -> None:
        self.adapter = adapter

    def timed(self, prompt: str, tokens: int) -> Generated:
        self.order.append("adapter" if self.adapter else "base")
        return Generated(tokens=tokens, prompt_s=0.1, decode_s=(tokens - 1) / (80 if self.adapter else 100))


def test_base_and_adapter_alternate_abba_and_the_ratio_is_of_the_medians():
    llm = FakeLlama()
    result = speed.generation(llm, Path("adapter.gguf"), rounds=4, tokens=33)
    assert llm.order == ["base", "adapter", "adapter", "base"] * 2
    assert result["decode_tokens_per_s"] == {"base": 100.0, "adapter": 80.0}
    assert result["adapter_over_base"] == 0.8
    assert result["prompt_s"] == {"base": 0.1, "adapter": 0.1}


def test_the_facts_are_asked_with_the_short_system_prompt():
    examples = speed.examples(2)
    assert [e.reply for e in examples] == ["Ada Quill.", "Teal and orange."]
    assert examples[0].messages[0] == speed.SYSTEM
