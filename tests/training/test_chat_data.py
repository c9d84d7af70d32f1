"""Chat examples as tokens: the loss is on the reply and its end token alone."""

from __future__ import annotations

from harness.training.chat_data import IGNORED, batch, encode_example, prompt_text
from tests.training import tiny

pytestmark = tiny.needs_train()


def test_the_labels_are_the_reply_and_its_end_token_and_the_prompt_is_ignored():
    tok = tiny.tokenizer()
    encoded = encode_example(tok, tiny.question("Capital of Peru?"), "Lima")
    prompt = tok(prompt_text(tok, tiny.question("Capital of Peru?")), add_special_tokens=False)["input_ids"]
    assert encoded.input_ids[:len(prompt)] == prompt
    assert encoded.labels[:len(prompt)] == [IGNORED] * len(prompt)
    assert tok.decode(encoded.labels[len(prompt):]) == "Lima<|im_end|>"
    assert encoded.target_tokens == len("Lima") + 1


def test_a_long_example_loses_its_prompt_from_the_left_and_keeps_its_reply():
    tok = tiny.tokenizer()
    encoded = encode_example(tok, tiny.question("x" * 200), "Lima", max_tokens=40)
    assert len(encoded.input_ids) == 40 and encoded.target_tokens == 5
    assert tok.decode(encoded.input_ids[-5:]) == "Lima<|im_end|>"


def test_a_batch_is_right_padded_with_the_padding_masked_and_ignored():
    tok = tiny.tokenizer()
    short, long = (encode_example(tok, tiny.question(q), "A") for q in ("Hi?", "Hello there?"))
    tensors = batch([short, long], pad_id=tok.pad_token_id)
    gap = len(long.input_ids) - len(short.input_ids)
    assert tensors["input_ids"].shape == (2, len(long.input_ids))
    assert tensors["attention_mask"][0].tolist() == [1] * len(short.input_ids) + [0] * gap
    assert tensors["labels"][0].tolist()[-gap:] == [IGNORED] * gap
