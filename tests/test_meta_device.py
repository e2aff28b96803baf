"""The device code on PyTorch's `meta` device: tensors with shapes and no values. A CPU tensor mixed
into device code fails there ("expected all tensors to be on the same device"), and so does any
read of a value (`.item()`, `float(t)`, a Python branch on a tensor): what would make a GPU wait."""

from __future__ import annotations

import pytest
import torch

from rnnlm.evaluation.context import context_nll, target_positions
from rnnlm.errors import RnnlmError
from rnnlm.evaluation.evaluate import reset_curve_totals
from rnnlm.models.config import ModelConfig
from rnnlm.models.language_model import RecurrentLM
from rnnlm.inference.decoding import Decoding
from rnnlm.inference.generation import generate, same_device
from rnnlm.evaluation.scoring import streamed_token_nll, windowed_total
from rnnlm.training.step import EagerStep, LossLog, make_optimizer
from tests.conftest import cell_configs

META = torch.device("meta")
CONFIGS = cell_configs({"layer_norm": True, "dropout_mode": "between", "layers": 1}, vocab_size=30, embd=8, hidden=16,
                       dropout=0.2)


def _meta_model(config: ModelConfig) -> RecurrentLM:
    return RecurrentLM(config).to(META)


def test_values_cannot_be_read_on_meta():
    """What the tests below rely on: reading a value back fails on the meta device."""
    with pytest.raises(Exception):
        torch.zeros((), device=META).item()


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.cell)
def test_a_training_step_runs_on_meta(config):
    model = _meta_model(config).train()
    step = EagerStep(model, make_optimizer(model, 1e-3, 0.01, META, graph=False), grad_clip=1.0)
    log = LossLog(2, META)
    tokens = torch.randint(30, (4, 9)).to(META)
    for _ in range(2):
        log.record(step(tokens[:, :-1], tokens[:, 1:]))
    assert all(p.grad is not None and p.grad.device == META for p in model.parameters())


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.cell)
def test_a_validation_pass_and_the_reset_and_context_curves_run_on_meta(config):
    model = _meta_model(config)
    ids = torch.randint(30, (50,))  # the split stays on the CPU; windows are moved to the device
    assert windowed_total(model, ids, window=8).device == META
    carried = streamed_token_nll(model, ids)
    totals = reset_curve_totals(model, ids, [1, 4, 16], carried)
    assert totals.shape == (4,) and totals.device == META
    losses = context_nll(model, ids, target_positions(50, 16, 10, seed=0), 16)
    assert losses.shape == (10,) and losses.device == META


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.cell)
@pytest.mark.parametrize("strategy", ["greedy", "temperature", "top_k", "top_p"])
def test_a_stateful_generation_runs_on_meta(config, strategy):
    decoding = Decoding(strategy, temperature=0.8, top_k=5, top_p=0.9)
    new = generate(_meta_model(config), [1, 2, 3], mode="stateful", decoding=decoding, max_new_tokens=4, num_samples=2)
    assert new.shape == (2, 4) and new.device == META


def test_a_generator_on_another_device_than_the_model_is_refused():
    with pytest.raises(RnnlmError, match="the sampling generator is on cpu, the model on meta"):
        generate(_meta_model(CONFIGS[0]), [1], mode="stateful", decoding=Decoding("greedy"), max_new_tokens=2,
                 generator=torch.Generator())


def test_same_device_reads_a_missing_index_as_the_current_one():
    assert same_device(torch.device("cpu"), torch.device("cpu"))
    assert not same_device(torch.device("cpu"), META)
    if torch.cuda.is_available():
        assert same_device(torch.device("cuda"), torch.device("cuda", torch.cuda.current_device()))
