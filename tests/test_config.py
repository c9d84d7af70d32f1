"""Config: every option of every group composes and validates; bad values fail in one line."""

import subprocess
import sys

import pytest
from hydra.errors import ConfigCompositionException

from harness.agent_run.plan import build_plan
from harness.config import ConfigError, HarnessConfig, check_output_dir
from harness.models.capabilities import check_model_name
from tests.conftest import CONF_DIR, compose_config, scripted_settings

GROUPS = {group.name: sorted(p.stem for p in group.glob("*.yaml"))
          for group in CONF_DIR.iterdir() if group.is_dir()}
"""Every option of every group; conf/variant/parts/ holds what variants start from."""


@pytest.mark.parametrize("group,option", [(g, o) for g, options in GROUPS.items() for o in options])
def test_every_option_of_every_group_composes_and_validates(group, option):
    settings = HarnessConfig.from_dictconfig(compose_config(f"{group}={option}"))
    assert settings.seeds == [settings.seed]


def test_defaults_are_the_real_offline_model_on_country_capitals():
    settings = HarnessConfig.from_dictconfig(compose_config())
    assert settings.model.name == "openai/smollm2" and settings.model.serves_locally
    assert settings.env.name == "countries" and settings.variant.name == "baseline"
    assert settings.model.local_server is not None and settings.model.local_server.price.input_per_token == 0


def test_an_api_model_leaves_the_local_server_unused():
    settings = HarnessConfig.from_dictconfig(compose_config("model=litellm", "model.name=openai/gpt-4o-mini"))
    assert not settings.model.serves_locally


def test_seed_override_reaches_the_agent_runs():
    assert HarnessConfig.from_dictconfig(compose_config("seed=7")).seeds == [7]
    assert HarnessConfig.from_dictconfig(compose_config("seeds=[0,1,2]")).seeds == [0, 1, 2]


def test_unknown_group_option_fails_with_hydras_error():
    with pytest.raises(ConfigCompositionException, match="Could not find 'variant/nonsense'"):
        compose_config("variant=nonsense")


@pytest.mark.parametrize("override,field", [
    ("budget.max_tokens=-5", "budget.max_tokens"),
    ("budget.max_cost_usd=-1", "budget.max_cost_usd"),
    ("stream.num_tasks=0", "stream.num_tasks"),
    ("seeds=[]", "seeds"),
    ("seeds=[1,1]", "seeds"),
    ("model.max_concurrency=0", "model.max_concurrency"),
    ("model.scripted.accuracy=1.5", "model.scripted.accuracy"),
    ("stream.scenario=shuffled", "stream.scenario"),
    ("+model.surprise=1", "model.surprise"),
    ("model.params.temperature=abc", "model.params.temperature"),
    ("model.params.temperature=-0.5", "model.params.temperature"),
    ("model.params.max_tokens=0", "model.params.max_tokens"),
    ("model.params.max_tokens=true", "model.params.max_tokens"),
    ("+model.params.top_p=1.5", "model.params.top_p"),
    ("+model.params.stop=[1,2]", "model.params.stop"),
    ("+model.params.timeout=5", "model.params"),
    ("model.api_base=localhost:8080", "model.api_base"),
    ("ray.address=garbage", "ray.address"),
])
def test_invalid_values_fail_in_one_line_naming_the_field(override, field):
    with pytest.raises(ConfigError) as caught:
        scripted_settings(override)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"invalid config: {field}:")


def test_a_completion_parameter_error_says_what_it_got():
    with pytest.raises(ConfigError) as caught:
        scripted_settings("model.params.temperature=abc")
    assert str(caught.value) == ("invalid config: model.params.temperature: Input should be a valid number "
                                 "(got 'abc')")


def test_an_argument_the_gateway_sets_is_refused_in_params():
    with pytest.raises(ConfigError, match=r"^invalid config: model.params: 'api_base' is set by the harness"):
        scripted_settings("+model.params.api_base=http://x")


@pytest.mark.parametrize("address", ["auto", "local", "warm", "10.0.0.5:6379", "ray://head:10001",
                                     "[::1]:6379"])
def test_every_form_of_ray_address_is_accepted(address):
    assert scripted_settings(f"ray.address='{address}'").ray.address == address


def test_provider_specific_params_pass_through_as_a_plain_dict():
    params = scripted_settings("+model.params.stop=[END]", "+model.params.repetition_penalty=1.1",
                               "model.params.temperature=1").model.params
    assert params == {"temperature": 1.0, "max_tokens": 48, "stop": ["END"], "repetition_penalty": 1.1}
    assert type(params) is dict


def test_an_output_dir_is_created_or_refused_in_one_line(tmp_path):
    check_output_dir("hydra.run.dir", str(tmp_path / "a" / "b"))
    assert (tmp_path / "a" / "b").is_dir()
    (tmp_path / "file").write_text("")
    for directory in (tmp_path / "file", tmp_path / "file" / "sub"):
        with pytest.raises(ConfigError) as caught:
            check_output_dir("hydra.sweep.dir", str(directory))
        assert str(caught.value) == (f"invalid config: hydra.sweep.dir: {tmp_path}/file is a file, "
                                     "not a directory")


def test_unknown_provider_fails_naming_the_model_field():
    with pytest.raises(ConfigError, match=r"^invalid config: model.name: litellm cannot route 'nosuch/x'"):
        check_model_name("nosuch/x")
    check_model_name("openai/gpt-4o-mini")
    check_model_name("anthropic/claude-3-5-haiku-latest")


def test_more_tasks_than_the_pool_has_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match=r"stream.num_tasks: 100000 exceeds the \d+ tasks"):
        build_plan(scripted_settings("stream.num_tasks=100000"), tmp_path)


def test_bad_env_option_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match=r"env\.families: unknown"):
        build_plan(scripted_settings("env.families=[moons]"), tmp_path)


def test_plan_is_seeded_and_run_ids_are_stable(tmp_path):
    first = build_plan(scripted_settings("seeds=[0,1]"), tmp_path)
    again = build_plan(scripted_settings("seeds=[0,1]"), tmp_path)
    assert [s.run_id for s in first] == [s.run_id for s in again]
    assert [t.task_id for t in first[0].tasks] == [t.task_id for t in again[0].tasks]
    assert [t.task_id for t in first[0].tasks] != [t.task_id for t in first[1].tasks]
    assert len({s.run_id for s in first}) == 2


@pytest.mark.parametrize("overrides, fix", [
    (["model.name=anthropic/claude-3-5-haiku-latest"], "use model=litellm model.name=anthropic/claude"),
    (["model=scripted", "model.name=openai/gpt-4o-mini"], "use model=litellm model.name=openai/gpt-4o-mini"),
])
def test_a_groups_settings_never_leak_to_another_model(overrides, fix):
    """The local model's 48 tokens and single connection must not silently apply to an API model."""
    with pytest.raises(ConfigError, match=f"invalid config: model: model.name=.*{fix}"):
        HarnessConfig.from_dictconfig(compose_config(*overrides))
    HarnessConfig.from_dictconfig(compose_config("model=litellm", overrides[-1]))  # the way that works
    HarnessConfig.from_dictconfig(compose_config("model.api_base=http://127.0.0.1:8011/v1"))  # same model


LONG_NAME = "n" * 256
"""One byte over what a file name may have."""


@pytest.mark.parametrize("option, written, problem", [
    ("env.path", "{tmp}/loop/tasks.jsonl", "a symbolic link loop: it cannot be resolved"),
    ("env.db_dir", "{tmp}/loop", "a symbolic link loop: it cannot be resolved"),
    ("env.path", LONG_NAME, "a name in it is 256 bytes, over the 255 a file name may have"),
    ("env.tuning_path", f"{{tmp}}/{LONG_NAME}/tasks.jsonl",
     "a name in it is 256 bytes, over the 255 a file name may have"),
    ("env.path", "~no-such-user-here/tasks.jsonl", "~no-such-user-here: no such user (~ names a home dir)"),
    ("env.db_dir", "~no-such-user-here", "~no-such-user-here: no such user (~ names a home dir)"),
], ids=["loop-in-path", "loop-dir", "long-hub-id", "long-dir-name", "unknown-user-path", "unknown-user-dir"])
def test_a_path_option_that_cannot_be_resolved_is_one_line_naming_the_option(tmp_path, option, written,
                                                                             problem):
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    value = written.format(tmp=tmp_path)
    with pytest.raises(ConfigError) as caught:
        HarnessConfig.from_dictconfig(compose_config("env=dataset", f"{option}='{value}'"))
    assert str(caught.value) == f"invalid config: {option}: {problem} (got {value!r})"


def test_a_path_in_a_list_that_cannot_be_resolved_is_named_by_its_place(tmp_path):
    with pytest.raises(ConfigError) as caught:
        HarnessConfig.from_dictconfig(compose_config("env=dataset", f"env.path=[{tmp_path}/a,'~nobody-x']"))
    assert str(caught.value) == ("invalid config: env.path.1: ~nobody-x: no such user (~ names a home dir) "
                                 "(got '~nobody-x')")


@pytest.mark.slow
def test_the_cli_stops_on_a_symbolic_link_loop_with_exit_2_in_one_line(tmp_path):
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    result = subprocess.run([sys.executable, "-m", "harness", "model=scripted", "embedder=hashing",
                             "progress=false", "cache.enabled=false", "env=jsonl",
                             f"env.path={tmp_path}/loop/tasks.jsonl", f"hydra.run.dir={tmp_path}/run"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip() == (f"error: invalid config: env.path: a symbolic link loop: it cannot be "
                                     f"resolved (got '{tmp_path}/loop/tasks.jsonl')")
    assert not list(tmp_path.rglob("manifest.json"))
