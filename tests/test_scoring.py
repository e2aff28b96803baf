"""Windowed scoring: batched windows equal a plain loop, every token predicted once."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from rnnlm.evaluation.scoring import Score, bits_per_char, streamed_nll, windowed_nll
from rnnlm.models.config import ModelConfig
from rnnlm.models.language_model import RecurrentLM


def _naive(model, tokens, window):
    total = 0.0
    with torch.no_grad():
        for start in range(0, tokens.numel() - 1, window):
            x = tokens[start : start + window]
            y = tokens[start + 1 : start + window + 1]
            x = x[: y.numel()]
            logits, _ = model(x[None])
            total += F.cross_entropy(logits[0], y, reduction="sum").item()
    return total


@pytest.mark.parametrize("window", [1, 3, 16, 50, 1000])
def test_batched_windows_equal_a_loop(window):
    torch.manual_seed(0)
    model = RecurrentLM(ModelConfig("gru", vocab_size=9, embd=4, hidden=6, layers=2, dropout=0.3)).double()
    tokens = torch.randint(0, 9, (203,))
    score = windowed_nll(model, tokens, window, batch_windows=7)
    assert score.tokens == 202
    assert score.nats == pytest.approx(_naive(model.eval(), tokens, window), rel=1e-12)


def test_uniform_model_scores_log_vocab():
    model = RecurrentLM(ModelConfig("rnn", vocab_size=8, embd=2, hidden=3, layers=1))
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    score = windowed_nll(model, torch.randint(0, 8, (50,)), 10)
    assert score.mean == pytest.approx(math.log(8))


def test_keeps_training_mode():
    model = RecurrentLM(ModelConfig("gru", vocab_size=5, embd=2, hidden=3, layers=1)).train()
    windowed_nll(model, torch.randint(0, 5, (20,)), 4)
    assert model.training


@pytest.mark.parametrize("chunk", [1, 7, 64, 10_000])
def test_streamed_equals_one_window_over_everything(chunk):
    torch.manual_seed(1)
    model = RecurrentLM(ModelConfig("lstm", vocab_size=9, embd=4, hidden=6, layers=2)).double()
    tokens = torch.randint(0, 9, (150,))
    streamed = streamed_nll(model, tokens, chunk=chunk)
    whole = windowed_nll(model, tokens, window=10_000)
    assert streamed.tokens == whole.tokens == 149
    assert streamed.nats == pytest.approx(whole.nats, rel=1e-12)


def test_bits_per_char():
    assert bits_per_char(math.log(2) * 10, 10) == pytest.approx(1.0)
    # a SentencePiece-like case: 4 tokens covering 10 characters at ln 4 nats each -> 8 bits / 10 chars
    assert Score(nats=4 * math.log(4), tokens=4).bits_per_char(10) == pytest.approx(0.8)


def test_a_scoring_batch_is_sized_for_the_caches_on_the_cpu_and_for_launches_on_cuda(monkeypatch):
    """The CPU keeps the width its caller sizes for the caches; CUDA takes 2^27 / hidden tokens a
    batch. windowed_nll follows the rule on its model's device (here the CPU, told it is CUDA), and how
    wide its batches are changes nothing beyond summation order."""
    from rnnlm.evaluation import scoring

    assert scoring.batch_tokens(torch.device("cpu"), 1024, 16384) == 16384
    assert scoring.batch_tokens(torch.device("cuda"), 1024, 16384) == 131072
    assert scoring.batch_tokens(torch.device("cuda:0"), 768, 1) == 174762
    assert scoring.batch_tokens(torch.device("cuda"), 2**28, 1) == 1
    torch.manual_seed(0)
    model = RecurrentLM(ModelConfig("gru", vocab_size=9, embd=4, hidden=6, layers=2)).double()
    tokens = torch.randint(0, 9, (40003,))
    on_cpu = windowed_nll(model, tokens, 3)
    widths = []
    forward = model.forward
    monkeypatch.setattr(model, "forward", lambda x, *a, **kw: widths.append(x.shape) or forward(x, *a, **kw))
    monkeypatch.setattr(scoring, "batch_tokens", lambda device, hidden, on_cpu: 2**27 // hidden)
    wide = windowed_nll(model, tokens, 3)
    assert widths == [(13334, 3)]  # all 40,002 / 3 windows in one batch; on the CPU 3 batches of 5,461 at most
    assert wide.nats == pytest.approx(on_cpu.nats, rel=1e-12)
