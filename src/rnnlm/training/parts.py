"""The objects a run trains with, built from its settings in a fixed order from its seed: the model,
its optimizer and learning-rate schedule, the sampler of its batches, the sampler of the study's
validation batch, and the optimizer step.

In:  `RunSettings` and the run's token ids (training and validation splits, int64).
Out: `Parts`, which the loop (`rnnlm.training.train`) drives and the record
     (`rnnlm.training.record`) saves into and restores from a resume file.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from rnnlm.models.kinds import build_model
from rnnlm.training.samplers import StreamSampler, WindowSampler, val_batch_seed
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

    @property
    def lr(self) -> float:
        """The learning rate of the epoch in progress."""
        return float(self.optimizer.param_groups[0]["lr"])


def build_parts(run: RunSettings, train_ids: Tensor, val_ids: Tensor) -> Parts:
    """The parts of `run`, seeded: the global generator (weights, dropout masks) from the run's seed,
    each sampler from a generator of its own."""
    torch.manual_seed(run.seed)
    model = build_model(run.config).to(run.device)
    graph = replays_a_graph(run.train.cuda_graph, run.device, run.carried)
    optimizer = make_optimizer(model, run.entry.lr, run.train.weight_decay, run.device, graph)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=run.epochs)
    batch, length = run.train.batch_size, run.train.seq_len
    sampler = (StreamSampler if run.carried else WindowSampler)(train_ids, batch, length, run.seed)
    val_batches = WindowSampler(val_ids, batch, length, val_batch_seed(run.seed))
    step = make_training_step(model, optimizer, run.train.grad_clip, run.device, graph, carry=run.carried)
    return Parts(model, optimizer, scheduler, sampler, val_batches, step, run.device)
