"""What harness/driver/hydra_insides.py relies on of Hydra's insides still holds: each check fails
naming the installed Hydra and the pin the module was written for, so that an upgrade that moves any
of it says so here rather than as a slower sweep or a wrong summary."""

import inspect
from pathlib import Path

import hydra
import pytest
from hydra._internal.callbacks import Callbacks
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra._internal.utils import create_config_search_path
from hydra.core.config_loader import ConfigLoader
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn, JobStatus
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, RunMode

from harness.driver.hydra_insides import SUPPORTED, failure
from tests.driver.insides import Insides

INSIDES = Insides("hydra-core", hydra.__version__, "harness/driver/hydra_insides.py", SUPPORTED)
relied_on = INSIDES.relied_on


def test_the_module_is_written_for_the_pinned_hydra_and_the_installed_one_is_it():
    INSIDES.check_pin()


def test_the_sweeper_asks_its_loader_by_keyword_for_each_job_before_it_launches_them():
    for loader in (ConfigLoader, ConfigLoaderImpl):
        arguments = list(inspect.signature(loader.load_sweep_config).parameters)
        relied_on(arguments == ["self", "master_config", "sweep_overrides"],
                  f"{loader.__name__}.load_sweep_config's arguments")
    checks = inspect.getsource(Sweeper.validate_batch_is_legal)
    relied_on("config_loader.load_sweep_config(" in checks and "hydra_context.config_loader" in checks,
              "the sweeper checks a batch through its hydra_context's config loader")
    sweep = inspect.getsource(BasicSweeper.sweep)
    relied_on(0 < sweep.find("validate_batch_is_legal(") < sweep.find("self.launcher.launch("),
              "the sweeper checks each batch before it launches it")


def _sweep_set_up(tmp_path: Path, launcher: str) -> tuple[HydraContext, list[object], object, object]:
    """The loader, sweeper and launcher of `python -m app -m hydra/launcher=<launcher>`, set up as Hydra
    sets them up, over a config of one key; and the compositions the loader makes, as they are made."""
    (tmp_path / "config.yaml").write_text("a: 1\n")
    loader = ConfigLoaderImpl(config_search_path=create_config_search_path(str(tmp_path)))
    master = loader.load_configuration(config_name="config", overrides=[f"hydra/launcher={launcher}"],
                                       run_mode=RunMode.MULTIRUN)
    composed, compose = [], loader.load_configuration

    def counted(*args, **kwargs):
        composed.append(kwargs.get("overrides"))
        return compose(*args, **kwargs)

    loader.load_configuration = counted
    context = HydraContext(config_loader=loader, callbacks=Callbacks(master))
    sweeper = Plugins.instance().instantiate_sweeper(hydra_context=context, task_function=lambda cfg: None,
                                                     config=master)
    return context, composed, sweeper, master


@pytest.mark.parametrize(("launcher", "compositions"), [("basic", 4), ("ray", 2)])
def test_with_the_harness_launcher_the_sweepers_check_and_the_launch_compose_each_job_once(
        tmp_path, launcher, compositions):
    """With Hydra's basic launcher each load composes the job again after the sweeper's check; the
    harness's, set up by the sweeper as Hydra sets it up (its loader's method replaced on the object),
    hands out copies of the check's compositions."""
    context, composed, sweeper, master = _sweep_set_up(tmp_path, launcher)
    sweeper.validate_batch_is_legal([["a=2"], ["a=3"]])
    job = context.config_loader.load_sweep_config(master, ["a=2"])
    again = context.config_loader.load_sweep_config(master, ["a=2"])
    assert job.a == 2 and job is not again
    said = f"{len(composed)} compositions of 2 jobs checked and 1 loaded twice, hydra/launcher={launcher}"
    if launcher == "basic":  # Hydra's own behaviour, which the harness's launcher is there to change
        relied_on(len(composed) == compositions, said)
    else:  # the harness's own launcher (hydra_insides.compose_once): its failure is the harness's
        assert len(composed) == compositions, said


def test_a_failed_jobs_error_is_kept_where_it_is_read_without_raising_it():
    error = RuntimeError("job exited: boom")
    failed = JobReturn(overrides=["a=2"], status=JobStatus.FAILED)
    failed.return_value = error
    relied_on(failure(failed) is error, "a JobReturn keeps its return value in _return_value")
    with pytest.raises(RuntimeError, match="boom"):
        failed.return_value  # noqa: B018 (the public read raises it: why the module reads it instead)
