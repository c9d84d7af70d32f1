"""The scripted model folds text as the environments do, though it imports none of them."""

import pytest

from envs.base import normalize
from harness.models.scripted import fold

SAMPLES = ["  São-Tomé. ", "Nuku\u2019alofa", "“Quoted”, it SAID!", "a\tb\n c", "", "ß Æ ﬁ"]


@pytest.mark.parametrize("text", SAMPLES)
def test_the_scripted_model_folds_as_the_environments_fold(text):
    assert fold(text) == normalize(text)
