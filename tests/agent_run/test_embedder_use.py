"""The embedder is served only to runs whose agent embeds (harness.agent_api.Agent.uses_embedder):
the local MiniLM costs a process, torch and seconds of every command's start-up."""

import asyncio

import pytest

from harness.agent_run.components import models_in_use
from harness.agent_run.plan import build_plan
from harness.models.model_client import AgentModelClient
from tests.conftest import scripted_settings

EMBEDDING = [
    ("variant=memory",),
    ("variant=reflexion_memory",),
    ("variant=reflexion", "variant.memory={}"),
    ("variant=baseline", "variant.memory={}"),
    ("variant=playbook",),
    ("variant=skills",),
    ("variant=reasoning_bank",),
    ("variant=cheatsheet", "variant.mode=retrieval_synthesis"),
    ("variant=external", "variant.entry=examples.outside_agents.baseline_agent:BaselineAgent"),
]
NOT_EMBEDDING = [
    ("variant=baseline",),
    ("variant=reflexion",),
    ("variant=retry",),
    ("variant=self_refine",),
    ("variant=best_of_k",),
    ("variant=opro",),
    ("variant=gepa",),
    ("variant=tool_learning",),
    ("variant=cheatsheet",),
]


@pytest.mark.parametrize("overrides", EMBEDDING, ids=lambda o: " ".join(o))
def test_a_variant_that_recalls_by_similarity_has_the_embedder_served(overrides, tmp_path):
    settings = scripted_settings("embedder=minilm", *overrides)
    assert [m.name for m in models_in_use(settings)] == ["scripted/oracle", "local/all-MiniLM-L6-v2"]
    assert all(spec.embeds for spec in build_plan(settings, tmp_path))


@pytest.mark.parametrize("overrides", NOT_EMBEDDING, ids=lambda o: " ".join(o))
def test_a_variant_that_never_embeds_has_no_embedder_started_for_it(overrides, tmp_path):
    settings = scripted_settings("embedder=minilm", *overrides)
    assert [m.name for m in models_in_use(settings)] == ["scripted/oracle"]
    specs = build_plan(settings, tmp_path)
    assert specs and not any(spec.embeds for spec in specs)
    # What the run records of its settings is the same either way: the embedder is still named.
    assert all(spec.settings["embedder.name"] == "local/all-MiniLM-L6-v2" for spec in specs)


def test_an_agent_that_embeds_after_saying_it_does_not_is_told_which_method_to_fix():
    client = AgentModelClient(gateway=None, model="scripted/default", run_id="r", embedder=None)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match=r"uses_embedder\(\) said it does not embed"):
        asyncio.run(client.embed(["a question"]))
