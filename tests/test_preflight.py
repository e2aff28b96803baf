"""The checks the `cell` stage makes before DVC deletes the model stages' outputs (`rnnlm.preflight`);
each refusal through `dvc repro` is in tests/test_pipeline.py."""

from __future__ import annotations

import dataclasses

import pytest

from rnnlm.models.config import RECURRENT
from rnnlm.models.kinds import build_model, count_parameters, on_meta
from rnnlm.params import load_params
from rnnlm.preflight import MOST_GATES, PER_PARAMETER, activation_bytes, step_bytes, weight_count
from tests.conftest import REPO_ROOT

PARAMS = load_params(REPO_ROOT / "params.yaml")


def _vocab(entry) -> int:
    return 65 if entry.tokens == "char" else PARAMS.tokenizer.vocab_size


def _parameters(entry) -> int:
    with on_meta():
        return count_parameters(build_model(entry.model_config(_vocab(entry))))


@pytest.mark.parametrize("name", list(PARAMS.models))
def test_the_weight_bounds_hold_every_model_between_them(name):
    """Refusing on the lower bound never refuses a run that would have fitted; below the upper one
    nothing needs refusing: every model of params.yaml lies between them."""
    entry = PARAMS.models[name]
    shape = (_vocab(entry), entry.embd, entry.hidden, entry.layers, entry.kind == RECURRENT)
    assert weight_count(*shape, gates=1, window=entry.window) <= _parameters(entry) <= weight_count(
        *shape, gates=MOST_GATES, own_state=True, window=entry.window)


def test_a_step_is_refused_by_its_exact_count_only_where_the_bounds_straddle_the_memory():
    entry = dataclasses.replace(PARAMS.models["astra_alpha"], hidden=20_000)
    activations = activation_bytes(65, 20_000, 1, 64, 128)
    exact = _parameters(entry) * PER_PARAMETER + activations
    low = weight_count(65, 64, 20_000, 1, True, gates=1) * PER_PARAMETER + activations
    assert low < exact
    assert step_bytes(entry, 65, 64, 128, available=None) is None  # memory unknown: nothing refused
    assert step_bytes(entry, 65, 64, 128, available=exact) is None  # it fits, just
    assert step_bytes(entry, 65, 64, 128, available=exact - 1) == exact  # between the bounds: the exact count
    assert step_bytes(entry, 65, 64, 128, available=low - 1) == low  # below the lower bound: no model built
    assert step_bytes(PARAMS.models["leviathan"], 65, 64, 128, available=2**34) is None  # 16 GiB: both bounds fit
