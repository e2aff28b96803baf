"""The fixed-window MLP baseline: exact size, the shared interface, and what its state means."""

from __future__ import annotations

import pytest
import torch

from rnnlm.models.cells import CELLS
from rnnlm.models.config import ModelConfig

from rnnlm.models.kinds import build_model, count_parameters
from rnnlm.params import load_params
from rnnlm.models.window_mlp import WindowMLP
from tests.conftest import REPO_ROOT


def _mlp(window: int = 4, layers: int = 2) -> WindowMLP:
    torch.manual_seed(0)
    config = ModelConfig("mlp", vocab_size=13, embd=5, hidden=16, layers=layers, window=window)
    return build_model(config).double().eval()


def test_bengio_mlp_parameter_count_is_exact():
    params = load_params(REPO_ROOT / "params.yaml")
    model = build_model(params.models["bengio_mlp"].model_config(65))
    # (65 + 1 padding) x 24 embedding, (8 * 24) -> 256 tanh layer, 256 -> 65 output
    assert count_parameters(model) == 66 * 24 + (8 * 24 * 256 + 256) + (256 * 65 + 65) == 67_697
    assert isinstance(model, WindowMLP)


def test_each_position_sees_exactly_its_window():
    model = _mlp(window=4)
    tokens = torch.randint(0, 13, (1, 12))
    with torch.no_grad():
        base, _ = model(tokens)
        changed = tokens.clone()
        changed[0, 5] = (changed[0, 5] + 1) % 13
        after, _ = model(changed)
    differs = ~torch.isclose(base, after).all(-1)[0]  # (T,)
    assert differs.tolist() == [t in (5, 6, 7, 8) for t in range(12)]  # positions 5..5+window-1


def test_stateful_incremental_equals_one_full_forward():
    model = _mlp(window=5)
    tokens = torch.randint(0, 13, (3, 14))
    with torch.no_grad():
        full, full_state = model(tokens)
        logits, state = model(tokens[:, :3])
        pieces = [logits]
        for t in range(3, 14):
            logits, state = model(tokens[:, t : t + 1], state)
            pieces.append(logits)
    torch.testing.assert_close(torch.cat(pieces, 1), full, rtol=0, atol=1e-12)
    assert state.shape == (3, 4)
    assert torch.equal(state, full_state) and torch.equal(state, tokens[:, -4:])


def test_stateless_is_a_window_of_one():
    """State reset: only the last token and padding, whatever came before it."""
    model = _mlp(window=6)
    a = torch.tensor([[1, 2, 3, 4, 9]])
    b = torch.tensor([[7, 7, 9]])
    with torch.no_grad():
        torch.testing.assert_close(model(a[:, -1:])[0], model(b[:, -1:])[0])
        assert not torch.allclose(model(a)[0][:, -1], model(b)[0][:, -1])


def test_window_of_one_has_an_empty_state():
    model = _mlp(window=1, layers=1)
    tokens = torch.randint(0, 13, (2, 7))
    with torch.no_grad():
        logits, state = model(tokens)
        alone, _ = model(tokens[:, 3:4])
    assert state.shape == (2, 0)
    torch.testing.assert_close(logits[:, 3:4], alone)


def test_mlp_samples_in_both_modes():
    from rnnlm.inference.decoding import Decoding
    from rnnlm.inference.generation import generate, make_generator

    model = _mlp()
    for mode in ("stateless", "stateful"):
        out = generate(model, [1, 2, 3], mode=mode, decoding=Decoding("top_k", top_k=5), max_new_tokens=9,
                       num_samples=2, generator=make_generator(0))
        assert out.shape == (2, 9) and int(out.max()) < 13  # never the padding id


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ({"kind": "mlp", "window": 0}, "models.m.window: expected a positive integer for kind 'mlp', got 0"),
        ({"cell": "mlp", "window": 0}, "models.m.window: expected a positive integer for kind 'mlp', got 0"),
        ({"cell": "gru", "window": 3}, "models.m.window: only kind 'mlp' has a window; remove it for cell 'gru'"),
        ({"kind": "mlp", "cell": "gru", "window": 3},
         "models.m.cell: only a recurrent model has a cell; remove it for kind 'mlp'"),
        ({"window": 0}, f"models.m.cell: expected one of {', '.join(map(repr, CELLS))} for a recurrent model "
                        "(or kind: 'mlp')"),
        ({"kind": "transformer"}, "models.m.kind: expected one of 'recurrent', 'mlp', got 'transformer'"),
    ],
)
def test_window_is_checked_against_the_cell(block, message):
    from rnnlm.errors import ParamsError
    from rnnlm.params import _build_models

    entry = dict(tokens="char", embd=4, hidden=4, layers=1, dropout=0.0, dropout_mode="between",
                 layer_norm=False, epochs=1, steps_per_epoch=1, lr=0.1, **block)
    with pytest.raises(ParamsError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _build_models({"m": entry}, "models")


def test_the_first_spelling_cell_mlp_reads_as_kind_mlp_and_checkpoints_keep_their_form():
    """params.yaml says `kind: mlp`; the study's run folders keep the first spelling, `cell: mlp`,
    which reads as the same entry. A checkpoint's config still says `cell: "mlp"` (as every
    checkpoint since the first), and a recurrent entry's stored form has no `kind` at all."""
    from rnnlm.params import as_dict, load_params, model_entry
    from tests.conftest import REPO_ROOT

    params = load_params(REPO_ROOT / "params.yaml")
    entry = params.models["bengio_mlp"]
    assert (entry.kind, entry.cell) == ("mlp", None)
    written = as_dict(entry)
    first = {("cell" if key == "kind" else key): value for key, value in written.items()}
    assert "cell" not in written and model_entry(first, "models.bengio_mlp") == entry
    assert entry.model_config(65).cell == "mlp" and entry.model_config(65).kind == "mlp"
    recurrent = params.models["astra_alpha"]
    assert (recurrent.kind, recurrent.cell) == ("recurrent", "gru") and "kind" not in as_dict(recurrent)
