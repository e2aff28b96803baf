"""One-token steps for sampling: a model's weights arranged once, then a few operations per token.

A `Stepper` arranges a `RecurrentLM`'s weights for a single step:

- the embedding and the first layer's input-side matrix are folded into one table (V, G*H), so
  the first layer's input product is a row lookup;
- every other matrix is used through a transposed view of the model's own weight (no copy: copying
  Leviathan's 80 MB cost more than 200 characters of sampling, and BLAS reads the transposed layout
  at batch 1 as fast), and the GRU's extra r/z biases are added into the input-side bias, so each
  gate product is one `addmm`;
- each layer's step is one call on the CPU (compiled, `csrc/scan_loops.cpp`: the hidden-side
  products and the gates in one pass), a few ATen calls elsewhere (`rnnlm.scan_loops`);
- on the CPU the whole step is one call too: `compiled`, the same step in C++
  (`csrc/generation.cpp`), which `rnnlm.sampling.generate` also runs its loop through; the Python
  `__call__` is its twin (what CUDA runs), and gives the same logits bit for bit;
- it runs under `torch.inference_mode`, so no autograd bookkeeping happens.

In:  tokens (B,) int64 and a state in the model's format (one entry per layer, h or (h, c);
     None means zeros). Out: logits (B, V) and the new state. Same function as
     `model(tokens[:, None], state)`, to rounding; tests hold it to that.

The table and the biases are computed when the stepper is made: make a new one after the weights
change.
"""

from __future__ import annotations

from types import ModuleType

import torch
import torch.nn.functional as F
from torch import Tensor

from rnnlm.cells import GRULayer, LSTMLayer, RecurrentLayer, RNNLayer
from rnnlm.model import LanguageModel, ModelState, RecurrentLM
from rnnlm import scan_loops
from rnnlm.native import compiled_for


class _LayerStep:
    """One layer's arranged weights and its step. `input_t` (I, G*H) is None for the first layer,
    whose input product comes from the folded embedding table; `loops` runs the step (compiled or
    Python, chosen once per stepper for its device)."""

    def __init__(self, layer: RecurrentLayer, input_t: Tensor | None, bias: Tensor, loops: ModuleType):
        self.hidden_size = layer.hidden_size
        self.input_t, self.bias = input_t, bias  # (I, G*H), (G*H)
        self.loops = loops

    def gates_x(self, x: Tensor) -> Tensor:
        """Input-side products (B, G*H) from the layer below's output x (B, I)."""
        return torch.addmm(self.bias, x, self.input_t)

    def zero_state(self, batch: int, like: Tensor):
        return like.new_zeros(batch, self.hidden_size)

    def hidden_t(self) -> list[Tensor]:
        """The hidden-side matrices, transposed, as the compiled step takes them."""
        raise NotImplementedError

    def step(self, gates_x: Tensor, state):
        raise NotImplementedError


class _GRUStep(_LayerStep):
    def __init__(self, layer: GRULayer, input_t: Tensor | None, bias: Tensor, loops: ModuleType):
        H = layer.hidden_size
        super().__init__(layer, input_t, torch.cat([bias[: 2 * H] + layer.cell.bias_rz, bias[2 * H :]]), loops)
        self.rz_t = layer.cell.weight_hh[: 2 * H].T  # (H, 2H)
        self.n_t = layer.cell.weight_hh[2 * H :].T  # (H, H)

    def hidden_t(self) -> list[Tensor]:
        return [self.rz_t, self.n_t]

    def step(self, gates_x: Tensor, h: Tensor) -> Tensor:
        return self.loops.gru_step(gates_x, h, self.rz_t, self.n_t)


class _LSTMStep(_LayerStep):
    def __init__(self, layer: LSTMLayer, input_t: Tensor | None, bias: Tensor, loops: ModuleType):
        super().__init__(layer, input_t, bias, loops)
        self.hh_t = layer.cell.weight_hh.T  # (H, 4H)

    def zero_state(self, batch: int, like: Tensor):
        return like.new_zeros(batch, self.hidden_size), like.new_zeros(batch, self.hidden_size)

    def hidden_t(self) -> list[Tensor]:
        return [self.hh_t]

    def step(self, gates_x: Tensor, state: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
        return tuple(self.loops.lstm_step(gates_x, state[0], state[1], self.hh_t))


class _RNNStep(_LayerStep):
    def __init__(self, layer: RNNLayer, input_t: Tensor | None, bias: Tensor, loops: ModuleType):
        super().__init__(layer, input_t, bias, loops)
        self.hh_t = layer.cell.weight_hh.T  # (H, H)

    def hidden_t(self) -> list[Tensor]:
        return [self.hh_t]

    def step(self, gates_x: Tensor, h: Tensor) -> Tensor:
        return self.loops.rnn_step(gates_x, h, self.hh_t)


_STEPS: dict[type[RecurrentLayer], type[_LayerStep]] = {GRULayer: _GRUStep, LSTMLayer: _LSTMStep, RNNLayer: _RNNStep}


class Stepper:
    """A model's one-token step with its weights arranged once; see the module docstring."""

    @torch.inference_mode()
    def __init__(self, model: RecurrentLM):
        native = compiled_for(model.head.weight)
        loops = native or scan_loops
        self.layers: list[_LayerStep] = []
        for i, layer in enumerate(model.layers):
            cell = layer.cell
            input_t = None if i == 0 else cell.weight_ih.T
            self.layers.append(_STEPS[type(layer)](layer, input_t, cell.bias_ih.clone(), loops))
        # Row v is token v's input-side products in the first layer, biases included: (V, G*H).
        self.table = model.first_layer_table() + self.layers[0].bias
        self.norm = model.norm
        self.head_t = model.head.weight.T  # (H, V)
        self.head_bias = model.head.bias.clone()
        self.compiled = None if native is None else native.Stepper(
            model.config.cell,
            self.table,
            [layer.input_t for layer in self.layers[1:]],
            [layer.bias for layer in self.layers[1:]],
            [layer.hidden_t() for layer in self.layers],
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
            logits, flat = self.compiled.step(tokens, flat_state(state))
            return logits, nested_state(flat, len(self.layers))
        x = None
        new_state = []
        for i, layer in enumerate(self.layers):
            gates_x = self.table[tokens] if i == 0 else layer.gates_x(x)  # (B, G*H)
            layer_state = layer.zero_state(len(tokens), self.table) if state is None else state[i]
            layer_state = layer.step(gates_x, layer_state)
            x = layer_state[0] if isinstance(layer_state, tuple) else layer_state  # (B, H)
            new_state.append(layer_state)
        if self.norm is not None:
            x = F.layer_norm(x, self.norm.normalized_shape, self.norm.weight, self.norm.bias, self.norm.eps)
        return torch.addmm(self.head_bias, x, self.head_t), tuple(new_state)


def flat_state(state: ModelState | None) -> list[Tensor]:
    """A model's state as the compiled step takes it: layer by layer, h (or h then c); None -> []."""
    if state is None:
        return []
    return [tensor for entry in state for tensor in (entry if isinstance(entry, tuple) else (entry,))]


def nested_state(flat: list[Tensor], layers: int) -> ModelState:
    """The inverse of `flat_state` for a model of `layers` layers."""
    per_layer = len(flat) // layers
    if per_layer == 1:
        return tuple(flat)
    return tuple(tuple(flat[i : i + per_layer]) for i in range(0, len(flat), per_layer))


def make_step(model: LanguageModel):
    """A one-token step for any model: a `Stepper` for a recurrent model; for other models (the
    fixed-window MLP, whose forward is already one product per layer) the model on one token."""
    if isinstance(model, RecurrentLM):
        return Stepper(model)

    @torch.inference_mode()
    def step(tokens: Tensor, state=None):
        logits, state = model(tokens[:, None], state)
        return logits[:, 0], state

    return step
