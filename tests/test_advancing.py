"""The advance, sampling's unit: weights arranged once, the same function as the model on one token."""

from __future__ import annotations

import pytest
import torch

from rnnlm.models.config import ModelConfig

from rnnlm.models.language_model import RecurrentLM
from rnnlm.inference.advancing import Advancer
from tests.conftest import cell_configs, randomised_model

CONFIGS = cell_configs({"layers": 3, "layer_norm": True})
LSTM = ModelConfig("lstm", vocab_size=11, embd=6, hidden=8, layers=2, layer_norm=True)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.cell)
def test_advances_equal_the_model_token_by_token(config, backend):
    model = randomised_model(config)
    tokens = torch.randint(0, config.vocab_size, (4, 15))
    state, expected_state = _advance_through(Advancer(model), model, tokens, rtol=1e-12, atol=1e-12)
    for a, b in zip(state, expected_state):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def _advance_through(advance, model, tokens, rtol, atol):
    """Feed `tokens` (B, T) to `advance` one column at a time, each token's logits held to the model's
    forward over the whole sequence; returns the advancer's final state and the model's."""
    with torch.no_grad():
        expected, expected_state = model(tokens)
    state = None
    for t in range(tokens.shape[1]):
        logits, state = advance(tokens[:, t], state)
        torch.testing.assert_close(logits.to(expected.dtype), expected[:, t], rtol=rtol, atol=atol)
    return state, expected_state


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.cell)
def test_float32_advances_match_the_float64_model(config, backend):
    """Sampling runs in float32, where the compiled advances take their vector code path; 37 hidden
    units leave a vector tail at every width."""
    config = ModelConfig(config.cell, config.vocab_size, config.embd, 37, config.layers, layer_norm=config.layer_norm)
    model = randomised_model(config)
    _advance_through(Advancer(_as_float32(model)), model, torch.randint(0, config.vocab_size, (3, 10)), rtol=1e-4, atol=1e-5)


def _as_float32(model: RecurrentLM) -> RecurrentLM:
    copy = RecurrentLM(model.config).eval()
    copy.load_state_dict({k: v.float() for k, v in model.state_dict().items()})
    return copy


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.cell)
def test_an_advance_continues_a_state_made_by_the_model(config, backend):
    """Stateful sampling feeds the prompt through the model and continues one token at a time."""
    model = randomised_model(config)
    tokens = torch.randint(0, config.vocab_size, (2, 8))
    with torch.no_grad():
        full, _ = model(tokens)
        _, prompt_state = model(tokens[:, :-1])
    logits, _ = Advancer(model)(tokens[:, -1], prompt_state)
    torch.testing.assert_close(logits, full[:, -1], rtol=1e-12, atol=1e-12)


def test_no_state_means_zeros_and_batch_one_works(backend):
    model = randomised_model(LSTM)
    advance = Advancer(model)
    token = torch.tensor([3])
    zeros = tuple((torch.zeros(1, 8, dtype=torch.float64),) * 2 for _ in range(2))
    torch.testing.assert_close(advance(token, None)[0], advance(token, zeros)[0])
    with torch.no_grad():
        torch.testing.assert_close(advance(token)[0], model(token[:, None])[0][:, 0])


def test_the_advancer_reads_the_matrices_in_place_and_a_new_one_sees_new_weights():
    model = randomised_model(CONFIGS[0])
    advance = Advancer(model)
    assert advance.head_t.data_ptr() == model.head.weight.data_ptr()  # a view, not a copy
    before = advance(torch.tensor([1]))[0]
    with torch.no_grad():
        model.head.bias.add_(1.0)
    torch.testing.assert_close(Advancer(model)(torch.tensor([1]))[0], before + 1.0)
