"""The count n-gram model on a corpus small enough to work out by hand."""

from __future__ import annotations

import math
import random

import pytest

from rnnlm.evaluation.ngram import NGramModel

CORPUS = [0, 1, 0, 1, 0, 2]  # counts: 0 x3, 1 x2, 2 x1; pairs: 01 x2, 10 x2, 02 x1


def test_unigram_by_hand():
    model = NGramModel(CORPUS, order=1, vocab_size=3, discount=0.5)
    # (c - D) / N + D * types / N * 1/V, with N = 6, types = 3
    assert model.prob([], 0) == pytest.approx(2.5 / 6 + 0.25 / 3)  # 0.5
    assert model.prob([], 1) == pytest.approx(1.5 / 6 + 0.25 / 3)  # 1/3
    assert model.prob([], 2) == pytest.approx(0.5 / 6 + 0.25 / 3)  # 1/6
    assert model.prob([1, 1], 2) == pytest.approx(1 / 6)  # history is ignored at order 1


def test_bigram_by_hand():
    model = NGramModel(CORPUS, order=2, vocab_size=3, discount=0.5)
    # after 0 (seen 3 times, 2 distinct followers): (c - 0.5) / 3 + 0.5 * 2 / 3 * unigram
    assert model.prob([0], 1) == pytest.approx(1.5 / 3 + (1 / 3) * (1 / 3))  # 11/18
    assert model.prob([0], 2) == pytest.approx(0.5 / 3 + (1 / 3) * (1 / 6))  # 2/9
    assert model.prob([0], 0) == pytest.approx((1 / 3) * 0.5)  # never seen after 0
    assert model.prob([2], 0) == pytest.approx(0.5)  # context 2 never seen: the unigram
    assert model.prob([1], 2) == pytest.approx(0.5 * 1 / 2 * (1 / 6))
    expected = math.log(11 / 18) + math.log(0.5 * 1 / 2 * (1 / 6))
    assert model.log_prob_sequence([0, 1, 2]) == pytest.approx(expected)


@pytest.mark.parametrize("order", [1, 2, 3, 5])
def test_every_distribution_sums_to_one(order):
    rng = random.Random(order)
    ids = [rng.randrange(6) for _ in range(300)]
    model = NGramModel(ids, order=order, vocab_size=7)  # token 6 never occurs
    for _ in range(20):
        history = [rng.randrange(7) for _ in range(rng.randrange(0, 6))]
        assert sum(model.prob(history, w) for w in range(7)) == pytest.approx(1.0)
        assert model.prob(history, 6) > 0


def test_higher_orders_fit_a_deterministic_sequence_better():
    ids = [0, 1, 2, 3] * 50
    scores = [-NGramModel(ids, order=n, vocab_size=4).log_prob_sequence(ids) for n in (1, 2)]
    assert scores[1] < scores[0] / 5


def test_lower_orders_from_one_set_of_counts_equal_separate_models():
    rng = random.Random(3)
    ids = [rng.randrange(5) for _ in range(400)]
    big = NGramModel(ids, order=4, vocab_size=5)
    for order in (1, 2, 3):
        alone = NGramModel(ids, order=order, vocab_size=5)
        assert big.log_prob_sequence(ids[:100], order=order) == pytest.approx(alone.log_prob_sequence(ids[:100]), rel=1e-12)
    with pytest.raises(ValueError, match="counted up to order 4"):
        big.prob([1], 2, order=5)
