"""The objects a run trains with, built from its settings in a fixed order from its seed: the model,
its optimizer and learning-rate schedule, the sampler of its batches, the sampler of the study's
validation batch, and the optimizer step.

In:  `RunSettings` and the run's token ids (training and validation splits, int64).
Out: `Parts`, which the loop (`rnnlm.training.train`) drives, and whose state (`state_dict`,
     `load_state_dict`) the record (`rnnlm.training.record`) saves into a resume file and restores.
Whether the run carries its state from window to window (`train.state: carried`) is read here, once:
it picks the sampler and the step, and what the state holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from rnnlm.models.cells.base import from_lists, to_lists
from rnnlm.models.kinds import build_model
from rnnlm.training.batches import StreamSampler, WindowSampler, val_batch_seed
from rnnlm.training.settings import RunSettings
from rnnlm.training.step import EagerStep, GraphStep, make_optimizer, make_training_step, replays_a_graph


@dataclass
class Parts:
    """A run's model and what trains it (module docstring)."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    sampler: WindowSampler | StreamSampler
    val_batches: WindowSampler  # the study's validation estimator: one random batch per epoch
    step: EagerStep | GraphStep  # holds the carried state of `train.state: carried`
    device: torch.device
    carried: bool  # `train.state: carried`: the sampler reads streams, the step carries the state

    @property
    def lr(self) -> float:
        """The learning rate of the epoch in progress."""
        return float(self.optimizer.param_groups[0]["lr"])

    def start_window(self, i: int, epoch_start: bool) -> None:
        """Before batch `i` of the sampler's last draw (`epoch_start`: the epoch's first batch): a
        carried run starts from zeros at a pass's first window and at the epoch's first."""
        if self.carried and (self.sampler.fresh[i] or epoch_start):
            self.step.reset_state()

    def state_dict(self) -> dict[str, Any]:
        """Everything of the parts that a run continues from, under the keys a resume file keeps: the
        weights, the optimizer and its schedule, each generator's state (the samplers', torch's and
        CUDA's) and, for a carried run, where the streams stand and the state the next window starts
        from (on the CPU; None at a pass's start)."""
        state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                 "scheduler": self.scheduler.state_dict(), "sampler_rng": self.sampler.generator.get_state(),
                 "torch_rng": torch.get_rng_state(), "val_batch_rng": self.val_batches.generator.get_state()}
        if self.device.type == "cuda":
            state["cuda_rng"] = torch.cuda.get_rng_state(self.device)
        if self.carried:
            carried = self.step.state
            state["stream_position"] = self.sampler.position
            state["carried_state"] = None if carried is None else [[t.cpu() for t in layer] for layer in to_lists(carried)]
        return state

    def required_keys(self) -> tuple[str, ...]:
        """The keys of `state_dict` that a resume file for these parts must hold: all but `cuda_rng` (a
        file written before CUDA's generator was kept lacks it) and `carried_state` (None at a pass's
        start)."""
        return tuple(key for key in self.state_dict() if key not in ("cuda_rng", "carried_state"))

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Put a `state_dict` back (a resume file's, checked against these parts before)."""
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.sampler.generator.set_state(state["sampler_rng"])
        self.val_batches.generator.set_state(state["val_batch_rng"])
        torch.set_rng_state(state["torch_rng"])
        if self.device.type == "cuda" and "cuda_rng" in state:
            torch.cuda.set_rng_state(state["cuda_rng"], self.device)
        if self.carried:
            self.sampler.position = state["stream_position"]
            carried = state.get("carried_state")
            self.step.state = None if carried is None else from_lists([[t.to(self.device) for t in layer]
                                                                       for layer in carried])


def build_parts(run: RunSettings, train_ids: Tensor, val_ids: Tensor) -> Parts:
    """The parts of `run`, seeded: the global generator (weights, dropout masks) from the run's seed,
    each sampler from a generator of its own."""
    torch.manual_seed(run.seed)
    model = build_model(run.config).to(run.device)
    carried = run.carried
    graph = replays_a_graph(run.train.cuda_graph, run.device, carried)
    optimizer = make_optimizer(model, run.entry.lr, run.train.weight_decay, run.device, graph)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=run.epochs)
    batch, length = run.train.batch_size, run.train.seq_len
    sampler = (StreamSampler if carried else WindowSampler)(train_ids, batch, length, run.seed)
    # The study's random validation batch, of at most the split's whole windows: a quick run's short
    # validation text (`rnnlm.scale`) would otherwise score the same tokens several times over.
    val_batches = WindowSampler(val_ids, min(batch, (val_ids.numel() - 1) // length), length, val_batch_seed(run.seed))
    step = make_training_step(model, optimizer, run.train.grad_clip, run.device, graph, carry=carried)
    return Parts(model, optimizer, scheduler, sampler, val_batches, step, run.device, carried)
