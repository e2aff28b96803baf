"""The language model: exact sizes, one interface, stateful use equal to one full forward."""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn

from rnnlm.models.config import ModelConfig

from rnnlm.models.kinds import build_model, count_parameters, described_count, summary

from rnnlm.models.language_model import RecurrentLM
from rnnlm.params import load_params
from tests.conftest import REPO_ROOT, cell_configs

PARAMS = load_params(REPO_ROOT / "params.yaml")
EXACT_COUNTS = {
    "astra_alpha": 86_913,
    "astra_beta": 715_713,
    "astra_alpha_carried": 86_913,  # the same models, trained with the state carried
    "astra_beta_carried": 715_713,
    "astra_gamma": 4_383_041,
    "scribe_alpha": 1_075_688,
    "scribe_beta": 5_102_056,
    "scribe_gamma": 14_439_400,
    "leviathan": 24_248_129,
    "rnn_alpha": 37_249,  # not in the study: Astra-alpha's sizes with the tanh cell
    "bengio_mlp": 67_697,  # not in the study: the fixed-window MLP baseline
    "mgu_alpha": 61_953,  # not in the study: Astra-alpha's sizes with the minimal gated unit
}


def _vocab(name: str) -> int:
    return 1000 if PARAMS.models[name].tokens == "sentencepiece" else 65


@pytest.mark.parametrize(("name", "count"), EXACT_COUNTS.items())
def test_parameter_counts_are_exact(name, count):
    assert count_parameters(build_model(PARAMS.models[name].model_config(_vocab(name)))) == count


@pytest.mark.parametrize("name", PARAMS.models)
def test_every_models_count_is_the_one_its_description_gives(name):
    """Each model of params.yaml, those without a count written above included (a new cell's): the
    built model's parameters are those its kind declares from the config (`parameter_count`, from
    each cell's `parameter_shapes`), and, where a count is written above, that count too."""
    config = PARAMS.models[name].model_config(_vocab(name))
    built = count_parameters(build_model(PARAMS.models[name].model_config(_vocab(name))))
    assert built == described_count(config) == EXACT_COUNTS.get(name, built)


def test_no_pytorch_recurrent_modules_anywhere():
    forbidden = (nn.RNNBase, nn.GRUCell, nn.LSTMCell, nn.RNNCell)  # RNNBase covers RNN, GRU, LSTM
    for name in PARAMS.models:
        model = build_model(PARAMS.models[name].model_config(_vocab(name)))
        assert not [m for m in model.modules() if isinstance(m, forbidden)], name
    # Python modules, and ATen's or libtorch's recurrent kernels in the C++ loops
    pattern = re.compile(r"nn(\.|::)(GRU|GRUCell|LSTM|LSTMCell|RNN|RNNCell)\b|at::(gru|lstm|rnn_tanh|rnn_relu|_thnn_fused)")
    sources = [*(REPO_ROOT / "src").rglob("*.py"), *(REPO_ROOT / "src").rglob("*.cpp")]
    assert any(p.suffix == ".cpp" for p in sources)
    offenders = [p for p in sources if pattern.search(p.read_text())]
    assert offenders == []


CONFIGS = [*cell_configs(), *cell_configs({"layers": 3, "dropout": 0.2, "dropout_mode": "between", "layer_norm": True},
                                          embd=5, hidden=7)]
LSTM = ModelConfig("lstm", vocab_size=11, embd=6, hidden=8, layers=2, layer_norm=True)


def _model(config: ModelConfig) -> RecurrentLM:
    torch.manual_seed(0)
    return RecurrentLM(config).double().eval()


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c.cell}-{c.layers}-{c.hidden}")
def test_stateful_incremental_equals_one_full_forward(config):
    model = _model(config)
    tokens = torch.randint(0, config.vocab_size, (3, 20))
    with torch.no_grad():
        full, full_state = model(tokens)
        prompt = 6
        pieces, state = [], None
        logits, state = model(tokens[:, :prompt], state)  # the prompt at once
        pieces.append(logits)
        for t in range(prompt, tokens.shape[1]):  # then one token at a time
            logits, state = model(tokens[:, t : t + 1], state)
            pieces.append(logits)
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, rtol=1e-12, atol=1e-12)
    for a, b in zip(state, full_state):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def _readable_forward(model: RecurrentLM, tokens):
    """The model spelled out with the cells' readable steps: embedding, each layer's reference loop,
    LayerNorm, head. No folded embedding table, no hand-written backward."""
    x = model.embedding(tokens)
    for layer in model.layers:
        x, _ = layer.reference_forward(x)
    if model.norm is not None:
        x = model.norm(x)
    return model.head(x)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c.cell}-{c.layers}-{c.hidden}")
def test_forward_and_gradients_equal_the_readable_model(config, backend):
    """The folded first-layer table and the scans' backward change nothing but rounding."""
    model = _model(config)
    tokens = torch.randint(0, config.vocab_size, (3, 12))
    weights = torch.randn(3, 12, config.vocab_size, dtype=torch.float64)
    results = []
    for forward in (lambda t: model(t)[0], lambda t: _readable_forward(model, t)):
        model.zero_grad()
        logits = forward(tokens)
        (logits * weights).sum().backward()
        results.append((logits.detach(), [p.grad.clone() for p in model.parameters()]))
    (fast, fast_grads), (readable, readable_grads) = results
    torch.testing.assert_close(fast, readable, rtol=1e-12, atol=1e-12)
    for a, b in zip(fast_grads, readable_grads):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c.cell}-{c.layers}-{c.hidden}")
def test_float32_forward_and_gradients_match_float64(config, backend):
    """Training runs in float32, where the products go through the chosen GEMM (MKL or oneDNN) and
    the compiled loops take their vector code: logits and every gradient against float64."""
    model64 = _model(config)
    model32 = RecurrentLM(config).eval()
    model32.load_state_dict({k: v.float() for k, v in model64.state_dict().items()})
    tokens = torch.randint(0, config.vocab_size, (5, 16))  # 16 steps: each is a kernel launch under Triton's interpreter
    weights = torch.randn(5, 16, config.vocab_size, dtype=torch.float64)
    results = []
    for model in (model64, model32):
        logits, _ = model(tokens)
        (logits * weights.to(logits.dtype)).sum().backward()
        results.append((logits.detach().double(), [p.grad.double() for p in model.parameters()]))
    (logits64, grads64), (logits32, grads32) = results
    torch.testing.assert_close(logits32, logits64, rtol=1e-4, atol=1e-5)
    for a, b in zip(grads32, grads64):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c.cell}-{c.layers}-{c.hidden}")
def test_stateless_step_sees_only_its_token(config):
    model = _model(config)
    tokens = torch.randint(0, config.vocab_size, (2, 9))
    with torch.no_grad():
        stateless, _ = model(tokens[:, -1:], None)
        alone, _ = model(tokens[:, -1:].clone())
        with_context, _ = model(tokens)
    torch.testing.assert_close(stateless, alone, rtol=0, atol=0)
    # the carried state does change the prediction at that position
    assert not torch.allclose(stateless[:, 0], with_context[:, -1])


def test_zero_state_equals_none():
    config = LSTM
    model = _model(config)
    tokens = torch.randint(0, config.vocab_size, (2, 5))
    zeros = tuple((torch.zeros(2, 8, dtype=torch.float64),) * 2 for _ in range(config.layers))
    with torch.no_grad():
        torch.testing.assert_close(model(tokens, zeros)[0], model(tokens)[0])


def test_training_mode_drops_and_eval_does_not():
    model = _model(ModelConfig("gru", vocab_size=11, embd=6, hidden=8, layers=2, dropout=0.5))
    tokens = torch.randint(0, 11, (2, 10))
    with torch.no_grad():
        a, b = model(tokens)[0], model(tokens)[0]
        model.train()
        c, d = model(tokens)[0], model(tokens)[0]
    torch.testing.assert_close(a, b)
    assert not torch.allclose(c, d)


def test_state_of_the_wrong_depth_is_refused():
    model = _model(ModelConfig("gru", vocab_size=11, embd=6, hidden=8, layers=2))
    with pytest.raises(ValueError, match="state has 1 layers, the model 2"):
        model(torch.zeros(1, 2, dtype=torch.long), (torch.zeros(1, 8),))


def test_summary_lists_parameters_and_total():
    text = summary(build_model(PARAMS.models["astra_alpha"].model_config(65)), "astra_alpha")
    assert "total parameters: 86,913" in text
    assert "size: 0.33 MB as float32" in text
    assert "layers.0.cell.bias_rz" in text and "Embedding -> GRULayer -> Linear" in text


def test_summary_command(in_process):
    done = in_process(["-m", "rnnlm.describe", "leviathan", "--prepared", "/nonexistent"], REPO_ROOT)
    assert done.returncode == 0, done.stderr
    assert "total parameters: 24,248,129" in done.stdout and "LayerNorm" in done.stdout
    assert "size: 92.50 MB as float32" in done.stdout


def test_summary_command_unknown_model(in_process):
    done = in_process(["-m", "rnnlm.describe", "astra_delta", "--prepared", "/nonexistent"], REPO_ROOT)
    assert done.returncode == 2
    assert done.stderr.startswith("error: model: 'astra_delta' is not under models:; expected one of astra_alpha")
