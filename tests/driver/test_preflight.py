"""The model check kept: a check that needed litellm and passed is recalled by a later command with
the same facts (litellm's version and settings, the harness's code, the models' settings), without
importing litellm; anything else is checked in full."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.config import ConfigError, HarnessConfig
from harness.driver import preflight
from harness.driver.preflight import check_models, checks_need_litellm, recall_checks, start_model_checks
from tests.conftest import scripted_settings
from tests.processes import ROOT

LEAN = ("model=litellm", "model.name=openai/my-served-model", "model.api_base=http://127.0.0.1:9/v1")


def lean_settings(kept: Path | None, *overrides: str) -> HarnessConfig:
    return scripted_settings(*LEAN, f"cache.model_checks={kept if kept is not None else 'null'}", *overrides)


def test_a_passed_check_is_recalled_by_a_later_process_that_never_imports_litellm(tmp_path):
    kept = tmp_path / "checks"
    settings = lean_settings(kept)
    assert checks_need_litellm(settings)
    checked = start_model_checks(settings).result(timeout=120)
    assert checked == check_models(settings) and len(list(kept.glob("*.json"))) == 1
    assert not checks_need_litellm(settings)

    # Another command, its server on another port: the same facts for the check.
    later = f"""
import json, sys
from tests.conftest import scripted_settings
from harness.driver.preflight import kept_form, start_model_checks
settings = scripted_settings(*{LEAN[:2]!r}, "model.api_base=http://127.0.0.1:8/v1",
                             "cache.model_checks={kept}")
checked = start_model_checks(settings).result(timeout=5)
print(json.dumps({{"checked": kept_form().dump_json(checked).decode(), "litellm": "litellm" in sys.modules}}))
"""
    ran = subprocess.run([sys.executable, "-c", later], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr[-2000:]
    recalled = json.loads(ran.stdout.splitlines()[-1])
    assert preflight.kept_form().validate_json(recalled["checked"]) == checked
    assert recalled["litellm"] is False


def test_every_fact_the_check_depends_on_is_in_its_key_and_a_secrets_value_is_not(tmp_path, monkeypatch):
    kept = tmp_path / "checks"
    start_model_checks(lean_settings(kept)).result(timeout=120)
    assert recall_checks(lean_settings(kept)) is not None
    assert recall_checks(lean_settings(kept, "model.params.temperature=0.5")) is None
    assert recall_checks(lean_settings(kept, "model.name=openai/another-model")) is None
    assert recall_checks(lean_settings(kept, "budget.max_cost_usd=1.0")) is None
    monkeypatch.setenv("LITELLM_SECRET_TOKEN", "not part of the key")
    assert recall_checks(lean_settings(kept)) is not None
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "False")
    assert recall_checks(lean_settings(kept)) is None
    monkeypatch.delenv("LITELLM_LOCAL_MODEL_COST_MAP")
    monkeypatch.setattr(preflight, "_litellm_version", lambda: "0.0.0")
    assert recall_checks(lean_settings(kept)) is None
    monkeypatch.undo()
    monkeypatch.setattr(preflight, "_code_digest", lambda: "other code")
    assert recall_checks(lean_settings(kept)) is None


def test_a_failed_check_is_not_kept_and_a_damaged_one_is_checked_again(tmp_path, monkeypatch):
    kept = tmp_path / "checks"
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    refused = scripted_settings("model=litellm", "model.name=openai/gpt-4o-mini",
                                f"cache.model_checks={kept}")
    for _ in range(2):  # refused each time, in full
        with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
            start_model_checks(refused).result(timeout=120)
    assert not kept.exists() or not list(kept.iterdir())

    settings = lean_settings(kept)
    checked = start_model_checks(settings).result(timeout=120)
    (written,) = kept.glob("*.json")
    written.write_text('{"params": {"temperature": ')  # as a full disk might leave it
    assert recall_checks(settings) is None
    assert start_model_checks(settings).result(timeout=120) == checked
    assert recall_checks(settings) == checked


def test_nothing_is_kept_where_the_setting_is_null_or_the_check_needs_no_litellm(tmp_path):
    start_model_checks(lean_settings(None)).result(timeout=120)
    assert recall_checks(lean_settings(None)) is None
    kept = tmp_path / "checks"
    scripted = scripted_settings(f"cache.model_checks={kept}")
    start_model_checks(scripted).result(timeout=5)
    assert not kept.exists() and not checks_need_litellm(scripted)


def test_a_check_that_holds_a_secrets_value_is_not_kept(tmp_path, monkeypatch):
    kept = tmp_path / "checks"
    monkeypatch.setenv("MY_SERVICE_TOKEN", "a-secret-value")
    settings = lean_settings(kept, "+model.params.user=a-secret-value")
    assert start_model_checks(settings).result(timeout=120).params["user"] == "a-secret-value"
    assert not kept.exists() or not list(kept.iterdir())
    start_model_checks(lean_settings(kept, "+model.params.user=someone")).result(timeout=120)
    assert len(list(kept.glob("*.json"))) == 1
