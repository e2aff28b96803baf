"""The context curve: targets predicted from exactly c tokens, against the stateful pass."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from rnnlm.evaluation import context
from rnnlm.evaluation.context import ContextCurve, ContextError, context_curve, context_nll, target_positions
from rnnlm.models.config import ModelConfig
from rnnlm.models.language_model import RecurrentLM
from rnnlm.evaluation.scoring import streamed_token_nll
from rnnlm.models.window_mlp import WindowMLP

IDS = torch.randint(12, (400,), generator=torch.Generator().manual_seed(0))


def _gru() -> RecurrentLM:
    torch.manual_seed(0)
    return RecurrentLM(ModelConfig("gru", vocab_size=12, embd=6, hidden=10, layers=2)).double().eval()


def test_targets_are_a_seeded_sorted_sample_with_room_for_the_longest_context():
    a, b = target_positions(400, 64, 100, seed=3), target_positions(400, 64, 100, seed=3)
    assert torch.equal(a, b) and not torch.equal(a, target_positions(400, 64, 100, seed=4))
    assert a.unique().numel() == 100 and torch.equal(a, a.sort().values) and int(a.min()) >= 64
    assert torch.equal(target_positions(70, 64, 100, seed=0), torch.arange(64, 70))  # fewer there: all of them
    with pytest.raises(ContextError, match="has 64 tokens; a context of 64 needs at least 65"):
        target_positions(64, 64, 10, seed=0)


@pytest.mark.parametrize("c", [1, 3, 17])
def test_batched_losses_equal_a_loop_over_targets(c, monkeypatch):
    monkeypatch.setattr(context, "MIN_WINDOWS", 1)
    model = _gru()
    positions = target_positions(IDS.numel(), 32, 25, seed=1)
    batched = context_nll(model, IDS, positions, c, batch_tokens=7 * c)  # several batches of 7 windows
    with torch.no_grad():
        naive = [F.cross_entropy(model(IDS[t - c : t][None])[0][0, -1], IDS[t]) for t in positions.tolist()]
    torch.testing.assert_close(batched, torch.stack(naive), rtol=1e-12, atol=1e-12)


def test_a_batch_holds_at_least_min_windows_and_fewer_tokens_for_a_wider_model(monkeypatch):
    calls = []
    model = _gru()
    forward = model.forward
    monkeypatch.setattr(model, "forward", lambda w, **kw: calls.append(w.shape) or forward(w, **kw))
    context_nll(model, IDS, target_positions(IDS.numel(), 32, 150, seed=1), 32, batch_tokens=32 * 10)
    full, rest = divmod(150, context.MIN_WINDOWS)  # 320 tokens would be 10 windows of 32: too few
    assert calls == [(context.MIN_WINDOWS, 32)] * full + ([(rest, 32)] if rest else [])
    wide = RecurrentLM(ModelConfig("gru", vocab_size=12, embd=6, hidden=1024, layers=1))
    assert context.batch_tokens_for(model) == 2**24 // 10 and context.batch_tokens_for(wide) == 16384


@pytest.mark.parametrize("make", [_gru, lambda: WindowMLP(ModelConfig("mlp", vocab_size=12, embd=5, hidden=16, layers=1,
                                                                      window=8)).double().eval()])
def test_the_last_step_alone_is_the_last_step_of_the_whole_forward(make):
    model = make()
    tokens = IDS[:60].view(3, 20)
    with torch.no_grad():
        whole, whole_state = model(tokens)
        last, last_state = model(tokens, last_only=True)
    assert last.shape == (3, 1, 12)
    torch.testing.assert_close(last[:, 0], whole[:, -1], rtol=1e-12, atol=1e-12)  # a product of fewer rows
    assert all(torch.equal(a, b) for a, b in zip(torch.utils._pytree.tree_leaves(whole_state),
                                                 torch.utils._pytree.tree_leaves(last_state)))


def test_carried_losses_equal_a_token_by_token_stream():
    model = _gru()
    carried = streamed_token_nll(model, IDS, chunk=37)
    state, losses = None, []
    with torch.no_grad():
        for t in range(IDS.numel() - 1):
            logits, state = model(IDS[t : t + 1][None], state)
            losses.append(F.cross_entropy(logits[0, -1], IDS[t + 1]))
    torch.testing.assert_close(carried, torch.stack(losses), rtol=1e-12, atol=1e-12)


def test_a_fixed_window_model_has_a_horizon_of_exactly_its_window():
    torch.manual_seed(0)
    model = WindowMLP(ModelConfig("mlp", vocab_size=12, embd=5, hidden=16, layers=1, window=8)).double().eval()
    carried = streamed_token_nll(model, IDS)
    curve = context_curve(model, IDS, carried, torch.ones(12), list(range(1, 13)), 300, seed=0, tolerance=1e-9)
    assert curve.horizon() == 8
    assert curve.bpc[6] != pytest.approx(curve.stateful_bpc, rel=1e-6)  # 7 tokens leave one place to padding
    for i in range(7, 12):  # from 8 on, exactly the carried losses
        assert curve.bpc[i] == pytest.approx(curve.stateful_bpc, rel=1e-12) and curve.se_bpc[i] < 1e-12


def test_bits_per_character_count_the_characters_of_the_targets():
    model = _gru()
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()  # uniform: ln 12 nats per target
    token_chars = torch.full((12,), 3)  # as if every token were 3 characters
    curve = context_curve(model, IDS, streamed_token_nll(model, IDS), token_chars, [4, 2, 2], 50, 0, 0.01)
    assert curve.lengths == [2, 4] and curve.targets == 50
    assert curve.bpc == pytest.approx([math.log(12) / 3 / math.log(2)] * 2)
    assert curve.stateful_bpc == pytest.approx(curve.bpc[0]) and curve.mean_chars == [6.0, 12.0]


def test_horizon_and_its_range_from_the_standard_errors():
    curve = ContextCurve(lengths=[1, 8, 64, 512], bpc=[3.0, 2.05, 2.019, 2.0], se_bpc=[0.1, 0.05, 0.01, 0.0],
                         mean_chars=[1, 8, 64, 512], stateful_bpc=2.0, targets=100, tolerance=0.01)
    assert curve.horizon() == 64
    assert curve.horizon(-2.0) == 8 and curve.horizon(2.0) == 512
    assert curve.as_metrics()["context_horizon_range"] == [8, 512]
    never = ContextCurve([1], [3.0], [0.0], [1.0], 2.0, 10, 0.01)
    assert never.horizon() is None


def test_lengths_longer_than_the_split_are_left_out():
    model = _gru()
    short = IDS[:40]
    curve = context_curve(model, short, streamed_token_nll(model, short), torch.ones(12), [1, 8, 64], 10, 0, 0.01)
    assert curve.lengths == [1, 8]
    with pytest.raises(ContextError, match="has 40 tokens; a context of 64 needs at least 65"):
        context_curve(model, short, streamed_token_nll(model, short), torch.ones(12), [64], 10, 0, 0.01)
