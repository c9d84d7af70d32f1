"""Without the `train` extra, weight learning stops in one line naming it."""

from __future__ import annotations

import pytest

from harness import extras
from harness.config import ConfigError
from harness.training.needs import MissingTrainExtra, require


def test_a_missing_train_module_is_one_line_naming_the_extra(monkeypatch):
    monkeypatch.setattr(extras, "_found", lambda module: module != "peft")
    with pytest.raises(MissingTrainExtra) as raised:
        require("variant=sft")
    assert str(raised.value) == 'variant=sft needs the train extra: pip install "harness[train]"'
    assert isinstance(raised.value, ConfigError), "a config error: exit 2, before anything starts"


def test_importing_the_room_imports_no_torch():
    import subprocess
    import sys

    code = "import sys, harness.training; print('torch' in sys.modules, len(harness.training.__all__))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out[0] == "False" and int(out[1]) > 10
