"""Sampling's unit, the advance: one token through a model, its weights arranged once, then a few
operations per token.

An `Advancer` arranges a `RecurrentLM`'s weights for a single token:

- the embedding and the first layer's input-side matrix are folded into one table (V, G*H), so
  the first layer's input product is a row lookup;
- each layer's weights are arranged by its cell's `layer_advance` (`rnnlm.models.cells`): transposed
  views of the model's own weights (no copy: a copy of a large model's weights costs more than
  a sample, and BLAS reads the transposed layout at batch 1 as fast) and every bias
  of a gate summed into one vector, so each gate product is one `addmm`; its `advance` runs the cell's
  loops for the device (`rnnlm.compute.backend`);
- where the "cpp" backend runs, the whole advance is one call too: `compiled`, the same in C++
  (`compute/cpp/generation.cpp`), which `rnnlm.inference.generation.generate` also runs its loop
  through; the Python `__call__` is its twin (what CUDA runs), and gives the same logits bit for bit;
- it runs under `torch.inference_mode`, so no autograd bookkeeping happens.

In:  tokens (B,) int64 and a state in the model's format (`rnnlm.models.cells.base`; None means zeros).
Out: logits (B, V) and the new state. Same function as `model(tokens[:, None], state)`, to
rounding; tests hold it to that.

The table and the biases are computed when the advancer is made: make a new one after the weights
change.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rnnlm.compute import backend
from rnnlm.models.cells import CELLS
from rnnlm.models.cells.layer_advance import LayerAdvance
from rnnlm.models.cells.base import ModelState, from_lists, hidden, loops_for, to_lists
from rnnlm.models.kinds import LanguageModel
from rnnlm.models.language_model import RecurrentLM, layer_norm
from rnnlm.compute.products import linear


class Advancer:
    """A model's advance by one token, its weights arranged once; see the module docstring."""

    @torch.inference_mode()
    def __init__(self, model: RecurrentLM):
        spec = CELLS[model.config.cell]
        weights = model.head.weight
        loops = loops_for(spec, weights)
        arrange = spec.layer_advance or LayerAdvance
        self.layers: list[LayerAdvance] = [arrange(layer, i == 0, loops) for i, layer in enumerate(model.layers)]
        # Row v is token v's input-side products in the first layer, biases included: (V, G*H).
        self.table = model.first_layer_table() + self.layers[0].bias
        self.norm = model.norm
        self.head_t = model.head.weight.T  # (H, V)
        self.head_bias = model.head.bias.clone()
        native = backend.compiled_for(weights.device, spec.name)
        self.compiled = None if native is None else native.Advancer(
            spec.name,
            self.table,
            [layer.input_t for layer in self.layers[1:]],
            [layer.bias for layer in self.layers[1:]],
            [layer.hidden_t for layer in self.layers],
            None if self.norm is None else self.norm.weight,
            None if self.norm is None else self.norm.bias,
            0.0 if self.norm is None else self.norm.eps,
            self.head_t,
            self.head_bias,
        )

    @torch.inference_mode()
    def __call__(self, tokens: Tensor, state: ModelState | None = None) -> tuple[Tensor, ModelState]:
        """tokens (B,) -> logits (B, V), new state (one entry per layer)."""
        if self.compiled is not None:
            logits, lists = self.compiled.advance(tokens, to_lists(state))
            return logits, from_lists(lists)
        x = None
        new_state = []
        for i, layer in enumerate(self.layers):
            gates_x = self.table[tokens] if i == 0 else layer.gates_x(x)  # (B, G*H)
            layer_state = layer.advance(gates_x, None if state is None else state[i])
            x = hidden(layer_state)  # (B, H)
            new_state.append(layer_state)
        if self.norm is not None:
            x = layer_norm(x, self.norm.weight, self.norm.bias, self.norm.eps)  # as the model's forward
        return linear(x, self.head_t.T, self.head_bias, narrow=True), tuple(new_state)


def make_advancer(model: LanguageModel):
    """The advance by one token of any model: an `Advancer` for a recurrent model; for other models
    (the fixed-window MLP, whose forward is already one product per layer) the model on one token."""
    if isinstance(model, RecurrentLM):
        return Advancer(model)

    @torch.inference_mode()
    def advance(tokens: Tensor, state=None):
        logits, state = model(tokens[:, None], state)
        return logits[:, 0], state

    return advance
