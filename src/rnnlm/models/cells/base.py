"""What every recurrent cell shares: its weight layout, its state's format, its layer over a
sequence, the generic scan through autograd, the helpers of hand-written backward passes, and its registry
entry (its advance by one token for sampling: `layer_advance.py`).

A cell is its maths, `Cell.recur` (one time step from the input-side pre-activations), in a module of
this folder with its layer and its `CellSpec` (`mgu.py`: nothing else). A cell may add loops as the
optimisation (`gru.py` + `gru_triton.py` + compute's `cpp/gru.cpp`, and the same for `lstm` and `rnn`): `Loops`
in Python with a `torch.autograd.Function` that assembles the weight gradients, the same loops
compiled in C++, and with the elementwise work fused into Triton kernels for CUDA. `rnnlm.models.cells.CELLS` registers the specs; everything else (params'
`cell` choices, the model's layer table, the advancer, the C++ build, the tests) derives from it.

Layer in:  x (B, T, I), state (None means zeros), optional dropout masks (T, B, H).
Layer out: outputs (B, T, H) (the hidden state of every time step) and the final state (see
the state's format below). Two forms compute the same function:

- `reference_forward`: the cell's `recur`, one time step after another, through autograd
  (`autograd_scan`);
- `forward` (training, scoring, the prompt of stateful sampling): the input-side products of all
  time steps in one matrix product (`input_products`), then `scan`: per time step only the
  hidden-side products and the gates, through autograd for a cell without loops, else through the
  loops `rnnlm.compute.backend` chooses for the device, with a backward pass written by hand.

Shapes: T time steps, B batch, H hidden units, G gates; scans are time-major.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, Union

import torch
from torch import Tensor, nn

from rnnlm.compute import backend
from rnnlm.models.cells.contract import check_contract
from rnnlm.compute.products import linear, t_addmm, t_mm

# ------------------------------------------------------------------ the state's format
# A layer's state is its `entries`: h alone for the GRU and the tanh RNN (1 entry), h and c for the
# LSTM (2 entries), each (B, H); a cell declares how many (`Cell.state_entries`). In the Python API
# a one-entry state is the tensor h itself and a two-entry state the tuple (h, c); a model's state is
# a tuple with one layer state per layer, and None means zeros everywhere. The compiled C++ advance
# takes the same state as one list of entries per layer (an empty list: zeros). Owned here and
# nowhere else.

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
    """A model state as the compiled advance takes it: one list of entries per layer; None -> []."""
    return [] if state is None else [entries(layer) for layer in state]


def from_lists(lists) -> ModelState:
    """The inverse of `to_lists` for a state that is not None."""
    return tuple(from_entries(layer) for layer in lists)


def detached(state: ModelState) -> ModelState:
    """The same state cut from the graph that made it: what a window hands the next when the state
    is carried through training (the gradient stops at the window's start)."""
    return tuple(from_entries(t.detach() for t in entries(layer)) for layer in state)


# The activations' derivatives from their outputs, written into a given tensor (the Python backward
# loops reuse their buffers): sigmoid_backward(grad, y, grad_input=out) = grad * y * (1 - y),
# tanh_backward(grad, y, grad_input=out) = grad * (1 - y * y).
sigmoid_backward = torch.ops.aten.sigmoid_backward.grad_input
tanh_backward = torch.ops.aten.tanh_backward.grad_input


def uniform_(tensor: Tensor, fan_in: int) -> None:
    """nn.Linear's default initialisation, U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    bound = 1.0 / math.sqrt(fan_in)
    nn.init.uniform_(tensor, -bound, bound)


class Cell(nn.Module):
    """Every gate's input-side matrix stacked in `weight_ih` (G*H, I) with its bias `bias_ih` (G*H),
    the hidden side stacked in `weight_hh` (G*H, H) or (G*H) (`recurrence`), initialised as
    nn.Linear's. Subclasses set `gates` (and `state_entries` if the state is more than h,
    `recurrence` if it is a vector, `parameter_shapes` if they have parameters of their own) and
    write the cell's maths once: `recur(gates_x (B, G*H), state) -> state`, one time step from the
    input-side pre-activations. Nothing else is assumed of a cell: its outputs may be any values
    (a ReLU's exact zeros included)."""

    gates: int
    state_entries: int = 1
    recurrence: str = "matrix"
    """The hidden side: "matrix", `weight_hh` (G*H, H), each gate reading every unit through a matrix
    product; "vector", `weight_hh` (G*H), each unit reading back only its own value (u * h, the
    diagonal recurrence of an IndRNN): no hidden-side product at all."""

    @classmethod
    def parameter_shapes(cls, input_size: int, hidden_size: int) -> dict[str, tuple[int, ...]]:
        """Each parameter's shape, by name, in the order the cell registers them: what it builds and
        what a model's parameter count is read from (`RecurrentLM.parameter_count`)."""
        rows = cls.gates * hidden_size
        hidden_side = (rows, hidden_size) if cls.recurrence == "matrix" else (rows,)
        return {"weight_ih": (rows, input_size), "bias_ih": (rows,), "weight_hh": hidden_side}

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        if self.recurrence not in ("matrix", "vector"):
            raise ValueError(f"{type(self).__name__}.recurrence {self.recurrence!r}: expected 'matrix' or 'vector'")
        self.input_size, self.hidden_size = input_size, hidden_size
        for name, shape in self.parameter_shapes(input_size, hidden_size).items():
            self.register_parameter(name, nn.Parameter(torch.empty(shape)))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        uniform_(self.weight_ih, self.input_size)
        uniform_(self.bias_ih, self.input_size)
        uniform_(self.weight_hh, self.hidden_size)

    def zero_state(self, batch: int, like: Tensor) -> LayerState:
        return zeros(self.state_entries, batch, self.hidden_size, like)

    def input_bias(self) -> Tensor:
        """(G*H): every bias of a gate's pre-activation, summed (the GRU folds in its extra r/z biases)."""
        return self.bias_ih

    def recur(self, gates_x: Tensor, state: LayerState) -> LayerState:
        """One time step: gates_x (B, G*H) = x W_ih^T + `input_bias()`, the layer's state -> its new state.
        The cell's maths, and all a new cell has to write: autograd differentiates it."""
        raise NotImplementedError

    def advance(self, x: Tensor, state: LayerState) -> LayerState:
        """One token from the layer's input x (B, I): the state after it."""
        return self.recur(x @ self.weight_ih.T + self.input_bias(), state)


class RecurrentLayer(nn.Module):
    """A cell run over a sequence; subclasses set `cell_class`, and a cell with loops of its own
    overrides `_scan` with its autograd Function.

    Dropout (`drop_state=True`, the study's choice) multiplies each time step's new hidden state by a
    mask, so the dropped state is both the time step's output and what the next time step receives.
    The masks for a whole sequence are drawn up front, so both forms can be given the same ones."""

    cell_class: type[Cell]
    spec: CellSpec
    """The registry entry that names this layer (set by that `CellSpec`)."""

    def __init__(self, input_size: int, hidden_size: int, dropout: float = 0.0, drop_state: bool = True):
        super().__init__()
        self.cell = self.cell_class(input_size, hidden_size)
        check_contract(self.cell)
        self.dropout = dropout
        self.drop_state = drop_state

    @property
    def hidden_size(self) -> int:
        return self.cell.hidden_size

    def dropout_masks(self, time_steps: int, batch: int, like: Tensor) -> Tensor | None:
        """Masks (T, B, H) of 0 and 1/keep for state dropout, or None when it is off.

        A unit is kept when a uniform 16-bit integer falls below round(keep * 2^16). The integers
        are the four 16-bit lanes of 64-bit draws: a quarter of the generator calls of one draw per
        unit, and drawing is most of a mask's cost. The keep probability is then within 2^-17 of
        1 - p (0.899994 for p = 0.1), and the scale uses that exact probability, so the expected
        mask is exactly 1.
        """
        if not (self.training and self.drop_state and self.dropout > 0):
            return None
        threshold = round((1.0 - self.dropout) * 2**16)
        units = time_steps * batch * self.hidden_size
        words = torch.empty((units + 3) // 4, dtype=torch.int64, device=like.device).random_(-(2**63), 2**63 - 1)
        draws = words.view(torch.int16)[:units].view(time_steps, batch, self.hidden_size)  # uniform on [-2^15, 2^15)
        kept = draws < threshold - 2**15
        return kept.to(like.dtype).mul_(2**16 / threshold)  # a Python scale: no host-to-device copy

    def _prepare(self, batch: int, time_steps: int, like: Tensor, state: LayerState | None, masks: Tensor | None):
        if state is None:
            state = self.cell.zero_state(batch, like)
        if masks is None:
            masks = self.dropout_masks(time_steps, batch, like)
        return state, masks

    def reference_forward(
        self, x: Tensor, state: LayerState | None = None, masks: Tensor | None = None
    ) -> tuple[Tensor, LayerState]:
        """The reference every scan is held to: the cell's `recur` time step after time step through autograd
        (`autograd_scan`), on input products of plain ATen (not `input_products`' GEMM choice)."""
        B, T, _ = x.shape
        state, masks = self._prepare(B, T, x, state, masks)
        hs, state = autograd_scan(self.cell, x.transpose(0, 1) @ self.cell.weight_ih.T, state, masks)  # (T, B, H)
        return hs.transpose(0, 1), state

    def forward(
        self, x: Tensor, state: LayerState | None = None, masks: Tensor | None = None
    ) -> tuple[Tensor, LayerState]:
        """The fast form: x (B, T, I) -> outputs (B, T, H) (a view of time-major memory), final state."""
        hs, state = self.scan(self.input_products(x.transpose(0, 1)), state, masks)  # (T, B, H)
        return hs.transpose(0, 1), state

    def input_products(self, x: Tensor) -> Tensor:
        """x (T, B, I) -> x W_ih^T (T, B, G*H) for every time step in one product; the biases come in `scan`."""
        return linear(x, self.cell.weight_ih)

    def scan(
        self, products: Tensor, state: LayerState | None = None, masks: Tensor | None = None
    ) -> tuple[Tensor, LayerState]:
        """Input products (T, B, G*H) -> the state after every time step (T, B, H), and the final state.

        A cell's loops consume the products: a contiguous `products` is overwritten with the
        activated gates (pass a clone to keep it)."""
        T, B, _ = products.shape
        state, masks = self._prepare(B, T, products, state, masks)
        return self._scan(products.contiguous(), state, masks)

    def _scan(self, products: Tensor, state: LayerState, masks: Tensor | None) -> tuple[Tensor, LayerState]:
        """The cell's `recur` time step after time step, differentiated by autograd (every operation of every
        time step recorded): what runs a cell without loops of its own, on every device. A cell with
        loops of its own overrides this with its autograd Function."""
        return autograd_scan(self.cell, products, state, masks)


def autograd_scan(cell: Cell, products: Tensor, state: LayerState,
                  masks: Tensor | None) -> tuple[Tensor, LayerState]:
    """products (T, B, G*H) = x W_ih^T, state, masks (T, B, H) or None -> the state after every time step
    (T, B, H) and the final state, through `cell.recur` and autograd."""
    bias = cell.input_bias()
    outputs = []
    for gates_x, mask in zip(products.unbind(0), time_steps_of(masks, products.shape[0])):
        state = cell.recur(gates_x + bias, state)
        if mask is not None:
            state = with_hidden(state, hidden(state) * mask)
        outputs.append(hidden(state))
    return torch.stack(outputs), state


# ------------------------------------------------------------------ the loops and the registry


class Loops(NamedTuple):
    """One implementation of a cell's per-time-step loops; the signatures are the cell's own (see its
    Python loops, the reference); `advance` is one token for sampling.

    How they save work: `forward` overwrites its input products with the activated gates and keeps
    them for the backward; `backward` runs the recurrence in reverse computing only the gate
    gradients and the state gradient per time step, writing the gate gradients over the gates (so
    that array becomes the gradient of the input products); then the hidden-side weight gradient is
    one product over all T*B rows and each bias gradient one sum. Autograd records none of it."""

    forward: Callable
    backward: Callable
    advance: Callable


@dataclass(frozen=True)
class CellSpec:
    """A cell's registry entry: its name in params.yaml (`cell:`) and its layer; for a cell with loops
    of its own, its sampling advance's weight layout, its Python loops (the reference of its compiled and
    Triton loops) and the function that hands compute its Triton loops. Its compiled loops, if any, are
    compute's `cpp/NAME.cpp` (`rnnlm.compute.sources`), which registers them under `name` in the C++.
    A cell without loops (`python_loops` None) runs its `recur` through autograd everywhere."""

    name: str
    layer: type[RecurrentLayer]
    layer_advance: type | None = None
    """How sampling arranges the layer's weights, a `rnnlm.models.cells.layer_advance.LayerAdvance`; None:
    that class itself, one transposed view of all hidden-side matrices."""
    python_loops: Loops | None = None
    triton_loops: Callable[[], Loops] | None = None
    """Returns the loops CUDA runs (its `NAME_triton.py`'s, imported when called): compute calls it
    only where Triton runs, so nothing else imports Triton. None: CUDA runs the Python loops."""
    hidden_products: tuple[int, ...] | None = None
    """The hidden-side products of one time step, each in multiples of H output rows (None: one product
    of all G*H rows for a matrix recurrence, none for a vector one); what a time step's products alone
    cost, for the speed benchmarks."""

    @property
    def state_entries(self) -> int:
        return self.layer.cell_class.state_entries

    def __post_init__(self) -> None:  # frozen: defaults filled in through object's own __setattr__
        if self.hidden_products is None:
            cell = self.layer.cell_class
            object.__setattr__(self, "hidden_products", (cell.gates,) if cell.recurrence == "matrix" else ())
        self.layer.spec = self  # a layer finds its loops through its spec


def loops_for(spec: CellSpec, tensor: Tensor) -> Loops | None:
    """The loops of `spec`'s cell that run on `tensor`'s device, as `rnnlm.compute.backend` decides (None for a
    cell without loops: autograd runs it)."""
    return backend.loops(spec, tensor.device)


# ------------------------------------------------------------------ helpers of the scans


def time_steps_of(tensor: Tensor | None, T: int) -> tuple[Tensor | None, ...]:
    """tensor (T, ...) as T views, made once (indexing inside a loop costs a dispatch per time step)."""
    return (None,) * T if tensor is None else tensor.unbind(0)


def grad_into_state(grad_here: Tensor, from_later: Tensor | None, mask: Tensor | None) -> Tensor:
    """The gradient w.r.t. a time step's new state before its mask: (its output's gradient `grad_here` +
    `from_later`, the gradient back from the later time steps) * mask."""
    grad = grad_here if from_later is None else grad_here + from_later
    if mask is not None:
        grad = grad * mask
    return grad


def state_weight_gradient(grad_gates: Tensor, h0: Tensor, hs: Tensor) -> Tensor:
    """Sum over time steps of grad_gates[t]^T h_prev[t], h_prev = h0, hs[0], ..., hs[T-2]: (G', H).
    Two products instead of one, so that h0 and hs need not be copied into one array."""
    T, B, H = hs.shape
    first = t_mm(grad_gates[0], h0)  # (G', H)
    if T == 1:
        return first
    later = grad_gates[1:].reshape((T - 1) * B, -1)
    return t_addmm(first, later, hs[:-1].reshape((T - 1) * B, H))


def consumed(ctx, products: Tensor) -> Tensor:
    """Tell autograd that forward wrote the gates over `products` (an input): it is returned as an
    output, marked dirty so that autograd knows, and not differentiable (its gradient is not used)."""
    ctx.mark_dirty(products)
    ctx.mark_non_differentiable(products)
    ctx.set_materialize_grads(False)  # no zero-filled (T, B, G*H) gradient for the gates output
    return products


def or_zeros(grad: Tensor | None, like: Tensor) -> Tensor:
    """An output's gradient, or zeros when autograd passes None (that output was not used)."""
    return torch.zeros_like(like) if grad is None else grad


def overwritten(gates: Tensor) -> Tensor:
    """After a backward wrote the gate gradients over the saved gates: bump their version, so that
    a second backward through the same graph (retain_graph=True) fails loudly instead of reading
    gradients as gates."""
    torch.autograd.graph.increment_version(gates)
    return gates
