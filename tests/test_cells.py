"""The fast layers compute the same function as the readable cell loops, values and gradients."""

from __future__ import annotations

import pytest
import torch

from rnnlm.cells import LAYERS, GRUCell



@pytest.fixture(autouse=True)
def _float64():
    """Equivalence is checked in float64: every tensor and layer a test here makes is float64."""
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(torch.float32)


def _randomised(layer):
    """Random weights of a useful scale (not the init's), so every gate is exercised."""
    with torch.no_grad():
        for p in layer.parameters():
            p.copy_(torch.randn_like(p) * 0.4)
    return layer


def _random_state(layer, batch):
    H = layer.hidden_size
    h = torch.randn(batch, H) * 0.5
    if isinstance(layer, LAYERS["lstm"]):
        return (h, torch.randn(batch, H) * 0.5)
    return h


def _flat(state):
    return torch.cat([s.reshape(-1) for s in state]) if isinstance(state, tuple) else state.reshape(-1)


def _run(layer, fn, x, state, masks):
    """Outputs, final state, and the gradients of a fixed random functional of both."""
    x = x.clone().requires_grad_(True)
    state = tuple(s.clone().requires_grad_(True) for s in state) if isinstance(state, tuple) else state.clone().requires_grad_(True)
    layer.zero_grad()
    out, final = fn(x, state, masks)
    g = torch.Generator().manual_seed(99)
    weights_out = torch.randn(out.shape, generator=g)
    weights_final = torch.randn(_flat(final).shape, generator=g)
    ((out * weights_out).sum() + (_flat(final) * weights_final).sum()).backward()
    grads = [x.grad] + [s.grad for s in (state if isinstance(state, tuple) else (state,))]
    grads += [p.grad.clone() for p in layer.parameters()]
    return out.detach(), _flat(final).detach(), grads


@pytest.mark.parametrize("cell", ["gru", "lstm", "rnn"])
@pytest.mark.parametrize(("input_size", "hidden_size", "steps", "batch"), [(3, 5, 7, 4), (16, 8, 12, 2), (9, 20, 1, 3)])
@pytest.mark.parametrize("with_masks", [False, True])
def test_fast_layer_equals_reference_loop(cell, input_size, hidden_size, steps, batch, with_masks):
    torch.manual_seed(input_size * 100 + hidden_size)
    layer = _randomised(LAYERS[cell](input_size, hidden_size, dropout=0.3)).eval()  # masks only if given
    x = torch.randn(batch, steps, input_size)
    state = _random_state(layer, batch)
    masks = (torch.rand(steps, batch, hidden_size) > 0.3).double() / 0.7 if with_masks else None
    fast = _run(layer, layer.forward, x, state, masks)
    ref = _run(layer, layer.reference_forward, x, state, masks)
    torch.testing.assert_close(fast[0], ref[0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(fast[1], ref[1], rtol=1e-12, atol=1e-12)
    assert len(fast[2]) == len(ref[2])
    for a, b in zip(fast[2], ref[2]):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("cell", ["gru", "lstm", "rnn"])
def test_state_dropout_draws_the_same_masks_in_both_forms(cell):
    layer = _randomised(LAYERS[cell](4, 6, dropout=0.5)).train()
    x = torch.randn(3, 5, 4)
    torch.manual_seed(7)
    fast, _ = layer(x)
    torch.manual_seed(7)
    ref, _ = layer.reference_forward(x)
    torch.testing.assert_close(fast, ref)
    assert (fast == 0).any()  # some units were dropped...
    layer.eval()
    assert not (layer(x)[0] == 0).any()  # ...and none are in eval mode


def test_zero_state_is_the_default():
    layer = _randomised(LAYERS["gru"](4, 6))
    x = torch.randn(2, 3, 4)
    torch.testing.assert_close(layer(x)[0], layer(x, torch.zeros(2, 6))[0])


def test_gru_step_applies_the_reset_gate_before_the_matrix():
    """A hand-worked step, I=1, H=2: r differs per unit, and W_h mixes the units."""
    cell = GRUCell(1, 2)
    with torch.no_grad():
        cell.weight_ih.zero_()
        cell.bias_ih.zero_()
        cell.weight_hh.zero_()
        cell.weight_hh[4:] = torch.tensor([[0.0, 1.0], [1.0, 0.0]])  # W_h swaps the two units
        cell.bias_rz.copy_(torch.tensor([10.0, -10.0, 0.0, 0.0]))  # r ~ (1, 0), z = 0.5
    h = torch.tensor([[0.6, -0.8]])
    r = torch.sigmoid(torch.tensor([10.0, -10.0]))
    candidate = torch.tanh(torch.stack([r[1] * -0.8, r[0] * 0.6]))  # W_h (r * h)
    expected = 0.5 * h + 0.5 * candidate
    torch.testing.assert_close(cell.step(torch.zeros(1, 1), h), expected)
    # PyTorch's GRU would compute r * (W_h h): (1 * -0.8, ~0 * 0.6), a different state
    pytorch_style = 0.5 * h + 0.5 * torch.tanh(r * torch.tensor([-0.8, 0.6]))
    assert not torch.allclose(expected, pytorch_style, atol=1e-3)


def test_dropout_masks_keep_one_minus_p_and_average_one():
    layer = LAYERS["gru"](4, 50, dropout=0.15).train()
    torch.manual_seed(3)
    masks = layer.dropout_masks(200, 40, torch.zeros(()))  # 400,000 units
    kept = masks > 0
    assert masks.shape == (200, 40, 50)
    assert set(masks.unique().tolist()) == {0.0, masks.max().item()}
    assert abs(kept.double().mean().item() - 0.85) < 0.003  # ~5 standard deviations
    assert masks.max().item() == pytest.approx(2**16 / round(0.85 * 2**16), rel=1e-12)
    assert layer.eval().dropout_masks(3, 2, torch.zeros(())) is None


@pytest.mark.parametrize("cell", ["gru", "lstm", "rnn"])
def test_scan_gradients_pass_gradcheck(cell):
    """Finite differences against the hand-written backward, masks included."""
    layer = _randomised(LAYERS[cell](3, 4))
    products = torch.randn(5, 2, layer.cell.gates * 4, requires_grad=True)
    masks = (torch.rand(5, 2, 4) > 0.3).double() / 0.7
    state = _random_state(layer, 2)
    state = tuple(s.requires_grad_() for s in state) if isinstance(state, tuple) else state.requires_grad_()

    def f(products, *flat_state):
        s = flat_state if len(flat_state) == 2 else flat_state[0]
        hs, final = layer.scan(products, s, masks)
        return hs, _flat(final)

    flat = state if isinstance(state, tuple) else (state,)
    assert torch.autograd.gradcheck(f, (products, *flat))
