"""Count-based n-gram language models: the floor a one-token-context model cannot beat by much.

Smoothing: interpolated absolute discounting with discount D (0.75 by default), recursively down to
the uniform distribution over the vocabulary. For a context h (the previous n-1 tokens) seen c(h)
times, followed by N1+(h) distinct tokens:

    P(w | h) = max(c(h, w) - D, 0) / c(h)  +  D * N1+(h) / c(h) * P(w | h')
    P(w | h) = P(w | h')                                   if c(h) = 0

where h' is h without its oldest token, and the order-0 model is uniform, 1 / V. Every
distribution sums to one over the V tokens, so every token, even an unseen one, gets a probability.

In:  training ids, the highest order, the vocabulary size. Out: log-probabilities of a sequence
under the model of any order up to the highest (one set of counts serves every order, since the
order-n model is built on the order n-1 one).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence


class NGramModel:
    """Models of orders 1 (unigram) to `order`, counted on `ids`; `order` is the default one."""

    def __init__(self, ids: Sequence[int], order: int, vocab_size: int, discount: float = 0.75):
        if order < 1:
            raise ValueError("order must be at least 1")
        if not 0 < discount < 1:
            raise ValueError("discount must be in (0, 1)")
        self.order, self.vocab_size, self.discount = order, vocab_size, discount
        ids = list(ids)
        # For each context length m = 0 .. order-1: counts of (context, token) and of context.
        self._pair: list[Counter[tuple[int, ...]]] = []
        self._context: list[Counter[tuple[int, ...]]] = []
        self._followers: list[defaultdict[tuple[int, ...], int]] = []
        for m in range(order):
            pairs = Counter(tuple(ids[i - m : i + 1]) for i in range(m, len(ids)))
            contexts: Counter[tuple[int, ...]] = Counter()
            followers: defaultdict[tuple[int, ...], int] = defaultdict(int)
            for gram, count in pairs.items():
                contexts[gram[:-1]] += count
                followers[gram[:-1]] += 1
            self._pair.append(pairs)
            self._context.append(contexts)
            self._followers.append(followers)

    def _order(self, order: int | None) -> int:
        if order is None:
            return self.order
        if not 1 <= order <= self.order:
            raise ValueError(f"order {order}: this model was counted up to order {self.order}")
        return order

    def prob(self, history: Sequence[int], token: int, order: int | None = None) -> float:
        """P(token | the last order-1 ids of history); a shorter history uses what there is."""
        m_max = min(self._order(order) - 1, len(history))
        p = 1.0 / self.vocab_size
        for m in range(0, m_max + 1):  # from the unigram up to the longest context
            context = tuple(history[len(history) - m :]) if m else ()
            seen = self._context[m].get(context, 0)
            if seen == 0:
                continue  # an unseen context passes the lower order's probability through
            count = self._pair[m].get(context + (token,), 0)
            p = max(count - self.discount, 0.0) / seen + self.discount * self._followers[m][context] / seen * p
        return p

    def log_probs(self, ids: Sequence[int], start: int = 1, order: int | None = None) -> list[float]:
        """ln P(ids[i] | ids[:i]) for each i from `start` (the first `start` tokens are context only)."""
        order = self._order(order)
        ids = list(ids)
        return [math.log(self.prob(ids[max(0, i - order + 1) : i], ids[i], order)) for i in range(start, len(ids))]

    def log_prob_sequence(self, ids: Sequence[int], start: int = 1, order: int | None = None,
                          terms: list[float] | None = None) -> float:
        """Sum of `log_probs`, added one after another in order; `terms`, when given, receives them."""
        total = 0.0
        values = self.log_probs(ids, start, order)
        for value in values:
            total += value
        if terms is not None:
            terms.extend(values)
        return total
