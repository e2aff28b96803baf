"""The format of a recurrent model's state, owned here and nowhere else.

A layer's state is its `entries`: h alone for the GRU and the tanh RNN (1 entry), h and c for the
LSTM (2 entries), each (B, H). In the Python API a one-entry state is the tensor h itself and a
two-entry state the tuple (h, c); a model's state is a tuple with one layer state per layer, and
None means zeros everywhere. The compiled C++ step takes the same state as one list of entries per
layer (an empty list: zeros). How many entries a cell has is its registry entry's `state_entries`.
"""

from __future__ import annotations

from typing import Union

from torch import Tensor

LayerState = Union[Tensor, tuple[Tensor, ...]]
"""h (B, H), or (h, c) each (B, H)."""

ModelState = tuple[LayerState, ...]
"""One `LayerState` per layer, bottom first."""


def zeros(entries: int, batch: int, hidden: int, like: Tensor) -> LayerState:
    """A zero layer state of `entries` tensors (B, H) with `like`'s dtype and device."""
    if entries == 1:
        return like.new_zeros(batch, hidden)
    return tuple(like.new_zeros(batch, hidden) for _ in range(entries))


def hidden(state: LayerState) -> Tensor:
    """The h of a layer state: what the layer outputs and the layer above reads."""
    return state[0] if isinstance(state, tuple) else state


def with_hidden(state: LayerState, h: Tensor) -> LayerState:
    """The same layer state with h replaced (dropout acts on h alone)."""
    return (h, *state[1:]) if isinstance(state, tuple) else h


def entries(state: LayerState) -> list[Tensor]:
    """A layer state as its list of entries: [h] or [h, c]."""
    return list(state) if isinstance(state, tuple) else [state]


def from_entries(tensors) -> LayerState:
    """The inverse of `entries`."""
    tensors = tuple(tensors)
    return tensors[0] if len(tensors) == 1 else tensors


def to_lists(state: ModelState | None) -> list[list[Tensor]]:
    """A model state as the compiled step takes it: one list of entries per layer; None -> []."""
    return [] if state is None else [entries(layer) for layer in state]


def from_lists(lists) -> ModelState:
    """The inverse of `to_lists` for a state that is not None."""
    return tuple(from_entries(layer) for layer in lists)


def detached(state: ModelState) -> ModelState:
    """The same state cut from the graph that made it: what a window hands the next when the state
    is carried through training (the gradient stops at the window's start)."""
    return tuple(from_entries(t.detach() for t in entries(layer)) for layer in state)
