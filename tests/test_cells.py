"""The fast layers compute the same function as the readable cell loops, values and gradients."""

from __future__ import annotations

import pytest
import torch

from rnnlm.models.cells import CELLS
from rnnlm.models.cells.gru import GRUCell



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
    entries = tuple(torch.randn(batch, H) * 0.5 for _ in range(layer.cell.state_entries))
    return entries if len(entries) > 1 else entries[0]


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


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize(("input_size", "hidden_size", "steps", "batch"), [(3, 5, 7, 4), (16, 8, 12, 2), (9, 20, 1, 3)])
@pytest.mark.parametrize("with_masks", [False, True])
def test_fast_layer_equals_reference_loop(cell, input_size, hidden_size, steps, batch, with_masks, backend):
    """Each cell's own scan (its loops, or autograd for a cell without) against `reference_forward`,
    its `recur` through autograd, in float64: values, final state and every gradient."""
    torch.manual_seed(input_size * 100 + hidden_size)
    layer = _randomised(CELLS[cell].layer(input_size, hidden_size, dropout=0.3)).eval()  # masks only if given
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


@pytest.mark.parametrize("cell", CELLS)
def test_state_dropout_draws_the_same_masks_in_both_forms(cell, backend):
    layer = _randomised(CELLS[cell].layer(4, 6, dropout=0.5)).train()
    x = torch.randn(3, 5, 4)
    torch.manual_seed(7)
    fast, _ = layer(x)
    torch.manual_seed(7)
    ref, _ = layer.reference_forward(x)
    torch.testing.assert_close(fast, ref)
    assert (fast == 0).any()  # some units were dropped...
    layer.eval()
    evaluated = layer(x)[0]
    layer.dropout = 0.0
    torch.testing.assert_close(evaluated, layer(x)[0], rtol=0, atol=0)  # ...and none are in eval mode


def test_zero_state_is_the_default():
    layer = _randomised(CELLS["gru"].layer(4, 6))
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
    torch.testing.assert_close(cell.advance(torch.zeros(1, 1), h), expected)
    # PyTorch's GRU would compute r * (W_h h): (1 * -0.8, ~0 * 0.6), a different state
    pytorch_style = 0.5 * h + 0.5 * torch.tanh(r * torch.tensor([-0.8, 0.6]))
    assert not torch.allclose(expected, pytorch_style, atol=1e-3)


def test_dropout_masks_keep_one_minus_p_and_average_one():
    layer = CELLS["gru"].layer(4, 50, dropout=0.15).train()
    torch.manual_seed(3)
    masks = layer.dropout_masks(200, 40, torch.zeros(()))  # 400,000 units
    kept = masks > 0
    assert masks.shape == (200, 40, 50)
    assert set(masks.unique().tolist()) == {0.0, masks.max().item()}
    assert abs(kept.double().mean().item() - 0.85) < 0.003  # ~5 standard deviations
    assert masks.max().item() == pytest.approx(2**16 / round(0.85 * 2**16), rel=1e-12)
    assert layer.eval().dropout_masks(3, 2, torch.zeros(())) is None


def _directional_derivatives(f, inputs, trials=4, eps=1e-6):
    """(analytic, numeric) v^T J u for random directions u (inputs) and v (output): the backward
    pass against central finite differences, one fresh forward per backward (gradcheck replays one
    graph, which a scan's backward consumes; see the next test)."""
    pairs = []
    g = torch.Generator().manual_seed(5)
    for _ in range(trials):
        u = [torch.randn(x.shape, generator=g) for x in inputs]
        xs = [x.detach().clone().requires_grad_() for x in inputs]
        out = f(*xs)
        v = torch.randn(out.shape, generator=g)
        grads = torch.autograd.grad(out, xs, v)
        analytic = sum((gr * du).sum() for gr, du in zip(grads, u))
        with torch.no_grad():
            plus = f(*[x + eps * du for x, du in zip(inputs, u)])
            minus = f(*[x - eps * du for x, du in zip(inputs, u)])
        pairs.append((analytic.item(), ((plus - minus) / (2 * eps) * v).sum().item()))
    return pairs


@pytest.mark.parametrize("cell", CELLS)
def test_scan_gradients_match_finite_differences(cell, backend):
    """The hand-written backward against finite differences, masks included."""
    layer = _randomised(CELLS[cell].layer(3, 4))
    products = torch.randn(5, 2, layer.cell.gates * 4)
    masks = (torch.rand(5, 2, 4) > 0.3).double() / 0.7
    state = _random_state(layer, 2)
    flat = state if isinstance(state, tuple) else (state,)

    def f(products, *flat_state):
        s = flat_state if len(flat_state) == 2 else flat_state[0]
        hs, final = layer.scan(products.clone(), s, masks)  # a clone: scan overwrites its products
        return torch.cat([hs.reshape(-1), _flat(final)])

    for analytic, numeric in _directional_derivatives(f, (products, *flat)):
        assert analytic == pytest.approx(numeric, rel=1e-6, abs=1e-8)


@pytest.mark.parametrize("cell", CELLS)
def test_scan_consumes_its_products_and_refuses_a_second_backward(cell, backend):
    layer = _randomised(CELLS[cell].layer(3, 4))
    x = torch.randn(5, 2, 3, requires_grad=True)
    products = layer.input_products(x)
    before = products.detach().clone()
    hs, _ = layer.scan(products)
    if CELLS[cell].python_loops is None:  # autograd's scan reads its products and keeps its graph
        hs.sum().backward(retain_graph=True)
        hs.sum().backward()
        assert torch.equal(products.detach(), before)
        return
    assert not torch.equal(products.detach(), before)  # now the activated gates
    hs.sum().backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        hs.sum().backward()


def test_scan_accepts_non_contiguous_products(backend):
    layer = _randomised(CELLS["gru"].layer(3, 4))
    products = torch.randn(2, 5, 12).transpose(0, 1)  # (T, B, 3H) as a strided view
    expected, _ = layer.scan(products.contiguous())
    torch.testing.assert_close(layer.scan(products)[0], expected, rtol=0, atol=0)


@pytest.mark.parametrize("cell", CELLS)
def test_float32_layer_matches_float64_reference(cell, backend):
    """Training runs in float32, where the compiled loops take another (vector-width) code path and
    the products the chosen GEMM. A gradient entry near zero is a sum of large terms (the tanh RNN's
    reach 80 here), so its error is judged against the gradient's scale."""
    torch.manual_seed(0)
    layer64 = _randomised(CELLS[cell].layer(10, 37))  # 37: a vector tail on every width
    layer32 = CELLS[cell].layer(10, 37).float()
    layer32.load_state_dict({k: v.float() for k, v in layer64.state_dict().items()})
    x = torch.randn(6, 9, 10)
    masks = (torch.rand(9, 6, 37) > 0.2).double() / 0.8
    state = _random_state(layer64, 6)
    as32 = (lambda s: tuple(t.float() for t in s)) if isinstance(state, tuple) else (lambda s: s.float())
    fast = _run(layer32, layer32.forward, x.float(), as32(state), masks.float())
    ref = _run(layer64, layer64.reference_forward, x, state, masks)
    torch.testing.assert_close(fast[0].double(), ref[0], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(fast[1].double(), ref[1], rtol=1e-4, atol=1e-5)
    for a, b in zip(fast[2], ref[2]):
        torch.testing.assert_close(a.double(), b, rtol=1e-3, atol=max(1e-4, 1e-5 * b.abs().max().item()))


@pytest.mark.parametrize("cell", CELLS)
def test_gradients_when_the_final_state_is_not_used(cell, backend):
    """Autograd passes no gradient for an unused output (the LSTM's final c here)."""
    layer = _randomised(CELLS[cell].layer(3, 5))
    x = torch.randn(2, 4, 3)
    grads = []
    for forward in (layer.forward, layer.reference_forward):
        layer.zero_grad()
        forward(x)[0].pow(2).sum().backward()
        grads.append([p.grad.clone() for p in layer.parameters()])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
