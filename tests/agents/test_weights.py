"""The weight learners (variant=sft, variant=dpo) on the scripted stand-in trainer: what they learn
from, when they update, how the update is served, priced, budgeted, snapshotted and resumed
(harness/training/run_trainer.py). The real trainer: tests/training/, and an e2e test there."""

import json

import pytest

from harness.agent_run.plan import build_plan
from harness.config import ConfigError
from harness.models.budget import exhausted
from harness.tables.records import Usage
from tests.conftest import replayed_run, run_variant, scripted_settings

LEARN = ["variant=sft", "variant.update_every=3", "stream.num_tasks=9"]


def by_position(rows: list[dict]) -> dict[int, dict]:
    return {row["stream_position"]: row for row in rows if not row.get("probe")}


def test_sft_updates_every_n_tasks_and_later_calls_are_served_with_the_new_adapter():
    run = run_variant(*LEARN, "stream.feedback=answer")
    updates = run.rows["training"]
    assert [u["stream_position"] for u in updates] == [2, 5, 8]
    assert [u["update"] for u in updates] == [1, 2, 3]
    assert all(u["trainer"] == "scripted" and u["kind"] == "sft" for u in updates)
    assert [u["previous_adapter"] for u in updates] == [None, updates[0]["adapter"], updates[1]["adapter"]]
    served = {c["episode_id"].rsplit("/", 1)[1]: c["adapter"] for c in run.rows["llm_calls"]}
    assert [served[str(p)] for p in range(9)] == [None] * 3 + [updates[0]["adapter"]] * 3 + [
        updates[1]["adapter"]] * 3
    # Episodes carry their updates' spend beside the calls', which stay sums of llm_calls.
    episodes = by_position(run.rows["episodes"])
    assert [episodes[p]["train_tokens"] for p in range(9)] == [
        next((u["tokens_trained"] for u in updates if u["stream_position"] == p), 0) for p in range(9)]
    assert all(u["tokens_trained"] > 0 and u["steps"] == 4 for u in updates)


def test_with_the_answer_revealed_sft_learns_the_tasks_it_failed_and_says_which_examples_were_revealed():
    run = run_variant(*LEARN, "stream.feedback=answer", "model.scripted.accuracy=0",
                      "stream.probe_every=9", "stream.probe_size=3")
    last = run.rows["training"][-1]
    assert last["examples"] == 9 and last["examples_revealed"] == 9 and last["examples_own"] == 0
    probes = [e for e in run.rows["episodes"] if e["probe"]]
    assert len(probes) == 3 and all(e["success"] for e in probes)  # accuracy 0: the adapter answers
    assert not any(e["success"] for e in run.rows["episodes"] if not e["probe"] and e["stream_position"] < 3)


def test_on_outcomes_alone_sft_trains_only_on_its_own_successes():
    run = run_variant(*LEARN, "model.scripted.accuracy=0.5")
    successes = sum(e["success"] for e in run.rows["episodes"])
    assert successes and run.rows["training"][-1]["examples_own"] == successes
    assert all(u["examples_revealed"] == 0 for u in run.rows["training"])
    nothing = run_variant(*LEARN, "model.scripted.accuracy=0")
    assert "training" not in nothing.rows  # no success, nothing to learn from, no update
    assert all(c["adapter"] is None for c in nothing.rows["llm_calls"])


def test_dpo_prefers_a_retry_that_succeeded_to_the_attempt_that_failed():
    run = run_variant("variant=dpo", "variant.update_every=4", "stream.num_tasks=8",
                      "model.scripted.accuracy=0.5")
    updates = run.rows["training"]
    assert updates and all(u["kind"] == "dpo" for u in updates)
    pairs = sum(1 for e in run.rows["episodes"] if e["success"] and e["attempts"] == 2)
    assert updates[-1]["examples"] == pairs and updates[-1]["examples_own"] == pairs


def test_dpo_with_the_answer_revealed_prefers_it_to_a_failed_reply():
    run = run_variant("variant=dpo", "variant.update_every=4", "stream.num_tasks=8",
                      "model.scripted.accuracy=0", "stream.feedback=answer")
    assert run.rows["training"][-1]["examples_revealed"] == 8


def test_an_isolated_stream_starts_every_task_from_the_base_weights():
    run = run_variant(*LEARN, "stream.feedback=answer", "variant.update_every=1", "stream=isolated")
    assert all(c["adapter"] is None for c in run.rows["llm_calls"])
    assert all(u["previous_adapter"] is None for u in run.rows["training"])


def test_training_counts_in_the_token_budget():
    calls_only = run_variant(*LEARN, "stream.feedback=answer", "model.scripted.accuracy=0")
    spent = calls_only.outcome.spent.total_tokens
    trained = sum(u["tokens_trained"] for u in calls_only.rows["training"])
    assert calls_only.outcome.stopped_by is None and trained > spent
    capped = run_variant(*LEARN, "stream.feedback=answer", "model.scripted.accuracy=0",
                         f"budget.max_tokens={spent + 10}")
    assert (capped.outcome.stopped_by or "").startswith("token budget spent")
    attempted = [e for e in capped.rows["episodes"] if e["attempted"]]
    assert len(attempted) == 3  # the first update's tokens spend the cap the calls alone would not


def test_a_flops_budget_counts_inference_and_training_together():
    run = run_variant(*LEARN, "stream.feedback=answer", "model.parameters=1000000")
    call = run.rows["llm_calls"][0]
    assert call["flops"] == 2 * 1_000_000 * call["total_tokens"]
    update = run.rows["training"][0]
    assert update["flops"] == 6 * 1_000_000 * update["tokens_trained"]
    inference = sum(c["flops"] for c in run.rows["llm_calls"] if c["episode_id"].endswith(("/0", "/1", "/2")))
    capped = run_variant(*LEARN, "stream.feedback=answer", "model.parameters=1000000",
                         f"budget.max_flops={inference + update['flops'] / 2}")
    assert capped.outcome.stopped_by.startswith("FLOPs budget spent")
    assert len([e for e in capped.rows["episodes"] if e["attempted"]]) == 3


def test_a_flops_budget_needs_the_models_parameter_count():
    with pytest.raises(ConfigError, match=r"budget\.max_flops needs model\.parameters"):
        scripted_settings("budget.max_flops=1e12")
    assert exhausted(scripted_settings().budget, Usage(flops=None)) is None


def test_a_model_whose_weights_cannot_be_loaded_is_refused_in_one_line(tmp_path):
    settings = scripted_settings("variant=sft", "model=litellm", "model.name=openai/gpt-4o-mini")
    with pytest.raises(ConfigError) as refused:
        build_plan(settings, tmp_path)
    assert "\n" not in str(refused.value)
    assert "cannot load the weights of openai/gpt-4o-mini" in str(refused.value)
    assert "model=smollm2" in str(refused.value)


def test_a_learners_snapshot_keeps_its_adapter():
    run = run_variant(*LEARN, "stream.feedback=answer")
    [snapshot] = run.rows["snapshots"]
    directory = run.workdir / snapshot["path"]
    state = json.loads((directory / "state.json").read_text())
    assert state["adapter"] == run.rows["training"][-1]["adapter"] and state["updates"] == 3
    assert json.loads((directory / "files" / "update.json").read_text())["adapter_hash"] == state["adapter"]


def test_a_resumed_learner_continues_from_the_same_adapter():
    overrides = ["variant=sft", "variant.update_every=2", "stream.feedback=answer"]
    whole, episodes = replayed_run(overrides, finished=0)
    resumed, replayed = replayed_run(overrides, finished=5)
    state = json.loads((whole / "state.json").read_text())
    assert state["updates"] == 4 and state["adapter"]
    assert json.loads((resumed / "state.json").read_text()) == state
    assert [e["success"] for e in replayed] == [e["success"] for e in episodes[5:]]


def test_the_report_matches_spend_with_training_counted_and_shows_its_share():
    import polars as pl

    from harness.report.comparison_sections import matched_sections
    from harness.tables.summary import summarize

    common = ["stream.num_tasks=9", "stream.feedback=answer", "model.parameters=1000000",
              "model.scripted.accuracy=0"]
    rows = [*run_variant("variant=baseline", *common).rows["episodes"],
            *run_variant(*LEARN, *common).rows["episodes"]]
    episodes = pl.DataFrame(rows)
    by_tokens, by_flops = matched_sections(episodes)
    assert "matched compute" in by_flops.title
    assert by_tokens.title.startswith("Accuracy at matched spend") and "tokens trained" in by_tokens.text
    assert by_flops.title.startswith("Accuracy at matched compute")
    # Matched at the baseline's total (the smaller), the learner is cut before its first update's episode:
    # its tokens trained count as spend.
    within = dict(by_tokens.table.select("variant", "episodes").iter_rows())
    assert within == {"baseline": 9, "sft": 2}
    assert by_tokens.table["train_share"].to_list() == [0.0, 0.0]
    learner_first = matched_sections(episodes.filter(pl.col("variant") == "sft"))[0].table
    assert learner_first["train_share"][0] > 0.5  # over its whole stream, most of its spend trained
    summary = summarize(episodes)
    trained = dict(summary.select("variant", "train_tokens").iter_rows())
    assert trained["baseline"] == 0 and trained["sft"] == episodes.filter(pl.col("variant") == "sft")[
        "train_tokens"].sum()


def test_a_run_started_from_a_learners_snapshot_is_served_with_its_adapter(tmp_path):
    from tests.agent_run.test_snapshots import written

    source = run_variant(*LEARN, "stream.feedback=answer")
    adapter = source.rows["training"][-1]["adapter"]
    snapshot = f"variant.start_from={written(source, tmp_path)}@final"
    follow = run_variant(*LEARN, "stream.num_tasks=3", snapshot)
    assert {c["adapter"] for c in follow.rows["llm_calls"]} == {adapter}
    [update] = follow.rows["training"]
    assert update["previous_adapter"] == adapter and update["update"] == 1  # this run's first
