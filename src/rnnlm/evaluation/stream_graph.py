"""The stateful pass on CUDA, one chunk of tokens replayed from a captured CUDA graph.

In:  a model on CUDA, the first chunk of a stream, its inputs and targets (1, chunk), and how a
     chunk's logits (1, chunk, V) and targets become its losses (chunk,).
Out: `StreamGraph`: `first`, the first chunk's losses (run eagerly, which also warms the kernels up
     for the capture); then, called with each later chunk of the same length, that chunk's losses
     (chunk,), the state carried from call to call inside the graph; `state()`, a copy of the state
     after the last chunk, for a shorter tail run eagerly.

Why: the stateful pass feeds the validation split through at batch 1, about 100,000 time steps,
each a few kernel launches per layer that do almost no work, so launching them one by one from
Python is nearly all its cost. The graph records one chunk's launches once; each replay is one call.
The kernels and their shapes are those of the eager pass, so the losses are too (tests/test_cuda.py).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from rnnlm.models.cells.base import ModelState, entries, from_entries
from rnnlm.models.kinds import LanguageModel


def _tensors(state: ModelState) -> list[Tensor]:
    """Every tensor of a model state, layer by layer (an LSTM layer holds two)."""
    return [t for layer in state for t in entries(layer)]


def _copy(state: ModelState) -> ModelState:
    return tuple(from_entries(t.clone() for t in entries(layer)) for layer in state)


class StreamGraph:
    """See the module docstring. The model must stay in eval mode while it is used (no dropout)."""

    def __init__(self, model: LanguageModel, x: Tensor, y: Tensor, losses: Callable[[Tensor, Tensor], Tensor]):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # the eager run before a capture belongs on a side stream
            logits, state = model(x)  # (1, chunk, V)
            self.first = losses(logits, y)  # (chunk,)
        torch.cuda.current_stream().wait_stream(side)
        for tensor in (self.first, *_tensors(state)):  # made on the side stream, read on this one
            tensor.record_stream(torch.cuda.current_stream())
        self.x, self.y, self.held = x.clone(), y.clone(), _copy(state)  # the graph's inputs
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            logits, state = model(self.x, self.held)
            for held, new in zip(_tensors(self.held), _tensors(state)):
                held.copy_(new)  # the state the next replay starts from
            self.losses = losses(logits, self.y)  # (chunk,)

    def __call__(self, x: Tensor, y: Tensor) -> Tensor:
        """The losses of the next chunk, x and y (1, chunk) on the model's device: (chunk,)."""
        self.x.copy_(x)
        self.y.copy_(y)
        self.graph.replay()
        return self.losses.clone()

    def state(self) -> ModelState:
        """A copy of the state after the last chunk."""
        return _copy(self.held)
