"""One optimizer step that never waits on the device, run eagerly or replayed as one CUDA graph.

In:  a model, its optimizer, the gradient-clipping norm; per call a batch x, y (B, T) of token ids
     on the model's device.
Out: the step's training loss, a 0-d float32 tensor on the device. Reading it is the caller's
     choice: `LossLog` reads a whole run of steps at once.

A step is: forward, mean cross-entropy, backward, gradient-norm clipping, the optimizer's update.
Nothing in it reads a value back to the host or branches on one, so on CUDA the host runs ahead of
the GPU, and the whole step can be captured:

- `EagerStep` launches the operations as they come (the CPU, and CUDA with `train.cuda_graph: false`).
- `GraphStep` (CUDA) runs its first `warmup` calls eagerly, as real steps (AdamW creates its state
  there, cuBLAS its workspaces), on a side stream, then captures one step into a CUDA graph and
  replays it for every later call: the batch is copied into the graph's input tensors, and the
  thousands of small kernels of the recurrences (each layer's scan launches several per time step)
  start from the GPU without the host's launch cost. The dropout masks are drawn inside the graph
  (PyTorch's CUDA generator advances its offset at every replay, so each replay draws new masks).
  The optimizer must be built with `capturable=True` and a tensor learning rate (`make_optimizer`),
  so that the learning-rate schedule reaches a graph whose kernels were recorded once.

A non-finite loss is not skipped inside the step (that would need its value on the host); the
caller finds it when it reads the losses and names the first bad step.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rnnlm.errors import RnnlmError
from rnnlm.models.cells.base import ModelState, detached


def make_optimizer(model: nn.Module, lr: float, weight_decay: float, device: torch.device,
                   graph: bool) -> torch.optim.AdamW:
    """AdamW for `model`; for a CUDA graph, capturable with its learning rate in a device tensor.

    On the CPU and CUDA the update is PyTorch's fused one (one pass over each parameter, its gradient
    and its two moments, where the default makes about ten), the same update to float32 rounding."""
    if graph:
        return torch.optim.AdamW(model.parameters(), lr=torch.tensor(lr, device=device),
                                 weight_decay=weight_decay, capturable=True)
    fused = True if device.type in ("cpu", "cuda") else None
    return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay, fused=fused)


class EagerStep:
    """forward, cross-entropy, backward, clipping, update: x, y (B, T) -> loss (0-d, on the device).

    With `carry`, each call starts from the state the previous call ended in, detached (`state`;
    None, zeros, after `reset_state`): the `train.state: carried` recipe."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, grad_clip: float, carry: bool = False):
        self.model, self.optimizer, self.grad_clip, self.carry = model, optimizer, grad_clip, carry
        self.state: ModelState | None = None

    def reset_state(self) -> None:
        self.state = None

    def __call__(self, x: Tensor, y: Tensor) -> Tensor:
        logits, state = self.model(x, self.state) if self.carry else self.model(x)  # (B, T, V)
        if self.carry:
            self.state = detached(state)
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
        self.optimizer.step()
        return loss.detach()


class GraphStep:
    """The `EagerStep` captured once as a CUDA graph and replayed; see the module docstring."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, grad_clip: float, warmup: int = 3):
        self.eager = EagerStep(model, optimizer, grad_clip)
        self.warmup = warmup
        self.calls = 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self.x = self.y = self.loss = None  # the graph's input and output tensors

    def __call__(self, x: Tensor, y: Tensor) -> Tensor:
        self.calls += 1
        if self.graph is None and self.calls <= self.warmup:
            return self._on_side_stream(x, y)
        if self.graph is None:
            self._capture(x, y)
        self.x.copy_(x)
        self.y.copy_(y)
        self.graph.replay()
        return self.loss

    def _on_side_stream(self, x: Tensor, y: Tensor) -> Tensor:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            loss = self.eager(x, y)
        torch.cuda.current_stream().wait_stream(side)
        return loss

    def _capture(self, x: Tensor, y: Tensor) -> None:
        """Record one step on static tensors; nothing runs until the first replay."""
        self.x, self.y = x.clone(), y.clone()
        self.eager.optimizer.zero_grad(set_to_none=True)  # the graph allocates the gradients it writes
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.loss = self.eager(self.x, self.y)
        self.graph = graph


def replays_a_graph(asked: bool, device: torch.device, carry: bool = False) -> bool:
    """Whether a training step is captured and replayed as a CUDA graph: when asked (`train.cuda_graph`),
    on CUDA, and not for a run that carries its state (a graph holds no state between replays)."""
    return asked and device.type == "cuda" and not carry


def make_training_step(model: nn.Module, optimizer: torch.optim.Optimizer, grad_clip: float,
                       device: torch.device, graph: bool, carry: bool = False) -> EagerStep | GraphStep:
    """A `GraphStep` where `replays_a_graph(graph, device, carry)`, else an `EagerStep` (one that
    carries its state from call to call with `carry`)."""
    if replays_a_graph(graph, device, carry):
        return GraphStep(model, optimizer, grad_clip)
    return EagerStep(model, optimizer, grad_clip, carry)


class NonFiniteLoss(RnnlmError):
    """A training step's loss was NaN or infinite."""


class LossLog:
    """Step losses kept on the device and read in blocks: one host synchronisation per `read`.

    `record(loss)` stores a step's loss (a device-side copy into a buffer); `read()` returns the
    values recorded since the last read, as floats, or raises `NonFiniteLoss` naming the first
    non-finite one by its step number (steps counted from `first_step`).
    """

    def __init__(self, capacity: int, device: torch.device, first_step: int = 1):
        self.buffer = torch.empty(capacity, device=device)
        self.count = 0
        self.next_step = first_step

    def record(self, loss: Tensor) -> None:
        self.buffer[self.count].copy_(loss)
        self.count += 1

    def read(self) -> list[float]:
        values = self.buffer[: self.count].tolist()
        first = self.next_step
        self.next_step += self.count
        self.count = 0
        for i, value in enumerate(values):
            if not math.isfinite(value):
                raise NonFiniteLoss(f"non-finite training loss ({value}) at step {first + i}")
        return values
