"""Train one model as the study does, repeatably, resumable after an interruption.

In:  the run's `RunSettings` (`rnnlm.training.settings`), its tokenizer, the train and validation
     texts, and its `RunRecord` (`rnnlm.training.record`: the resume file, the live report, timing).
Out: a `TrainResult`: the `Checkpoint` (weights, optimizer, config, tokenizer identity, params, and
     the weights after epoch 1, for the evaluation's first-epoch comparison) and the `History` of
     per-step and per-epoch metrics.

The study's recipe: AdamW (weight decay from params), CosineAnnealingLR stepped once per epoch with
T_max = epochs, cross-entropy, gradient-norm clipping, random windows of the training split drawn
by a seeded generator (`rnnlm.training.batches`). Unlike the study, the validation loss is measured
on the whole validation split (consecutive windows of the sequence length, each from a zero state)
after every epoch; the study's own estimator, the loss on one random validation batch, is recorded
beside it (`val_batch_loss`), drawn by a generator of its own so that training is the same with or
without it.

Each optimizer step is `rnnlm.training.step`'s: it never waits on the device (the losses are read once
every `train.check_every` steps, a block), and on CUDA it is replayed as one captured CUDA graph. The
record is told where the run stands at the end of each block and each epoch; on the CPU it resumes
bit-identical to a run that was never interrupted.
"""

from __future__ import annotations

import copy
import hashlib
import json
import statistics
import time

import torch
from torch import Tensor

from rnnlm.compute import threads
from rnnlm.data.tokenizers import Tokenizer
from rnnlm.errors import TrainingError
from rnnlm.evaluation.scoring import batch_nll, windowed_nll
from rnnlm.training.parts import Parts, build_parts
from rnnlm.training.progress import EpochProgress, History
from rnnlm.training.record import RunRecord, TrainResult
from rnnlm.training.settings import RunSettings
from rnnlm.training.step import LossLog


def train(run: RunSettings, tokenizer: Tokenizer, train_text: str, val_text: str,
          record: RunRecord | None = None) -> TrainResult:
    """Train `run`'s model (module docstring); `record` keeps its resume file, reports, progress bar
    and timing (by default: none of them but the bar). The resume file is left in place: the caller
    removes it (`result.resume.clear()`) once it has written every output."""
    train_ids, val_ids = token_ids(run, tokenizer, train_text, val_text)
    parts, record = build_parts(run, train_ids, val_ids), record or RunRecord()
    share_cores(run, parts)
    start = record.begin(run, parts, run_fingerprint(run, tokenizer, train_ids, val_ids))
    history, seconds = start.history, start.seconds
    for epoch in range(start.epoch, run.epochs + 1):
        done = start.progress if epoch == start.epoch else EpochProgress()  # steps, losses, seconds before this run
        epoch_start, lr = time.perf_counter() - done.seconds, parts.lr
        losses = _train_epoch(run, parts, record, history, seconds, epoch, done, epoch_start)
        parts.scheduler.step()
        with record.validation():
            val, val_batch = validate(parts, val_ids, run.train.seq_len)
        epoch_seconds = time.perf_counter() - epoch_start
        seconds += epoch_seconds
        history.epochs.append({"step": len(history.steps), "epoch": epoch, "train_loss": statistics.fmean(losses),
                               "val_loss": val, "lr": lr, "seconds": epoch_seconds, "val_batch_loss": val_batch})
        record.epoch_end(epoch, history, seconds, f"{run.name} epoch {epoch:02d}/{run.epochs} | train "
                         f"{statistics.fmean(losses):.4f} | val {val:.4f} | lr {lr:.2e} | {epoch_seconds:.1f}s")
    return record.result(tokenizer, history, seconds)


def _train_epoch(run: RunSettings, parts: Parts, record: RunRecord, history: History, seconds: float, epoch: int,
                 done: EpochProgress, epoch_start: float) -> list[float]:
    """The rest of `epoch` after what `done` holds, one block of `train.check_every` steps at a time:
    each step's row goes to `history.steps`, and after each block `record` is told where the run
    stands (`seconds`: the training seconds before this epoch; `epoch_start`: its perf_counter origin).
    Returns the epoch's training losses, `done`'s first."""
    parts.model.train()
    losses, lr, tokens_per_step = done.losses, parts.lr, run.train.batch_size * run.train.seq_len
    log = LossLog(run.train.check_every, run.device, first_step=len(history.steps) + 1)
    for first in range(done.steps, run.steps_per_epoch, run.train.check_every):
        block_start, size = time.perf_counter(), min(run.train.check_every, run.steps_per_epoch - first)
        _train_block(run, parts, log, first, size)
        block = record.losses(log.read, epoch)  # the host waits for the device here only, once a block
        rate = tokens_per_step * size / (time.perf_counter() - block_start)  # the block's mean rate
        history.steps += [{"step": len(history.steps) + k + 1, "epoch": epoch, "train_loss": loss, "lr": lr,
                           "tokens_per_second": rate} for k, loss in enumerate(block)]
        losses += block
        record.block_end(epoch, history, seconds,
                         EpochProgress(first + size, losses, time.perf_counter() - epoch_start))
    return losses


def _train_block(run: RunSettings, parts: Parts, log: LossLog, first: int, size: int) -> None:
    """Steps `first` to `first + size - 1` of an epoch: their batches copied to the device at once, the
    state reset before a pass's or the epoch's first window when the run carries it, each step's loss
    kept on the device in `log` (nothing here waits for the device)."""
    xs, ys = (t.to(run.device) for t in parts.sampler.batches(size))  # (size, B, T): one copy per block
    for i in range(size):
        parts.start_window(i, epoch_start=first + i == 0)
        threads.refresh()  # this run's share of the cores, counted again at most once a second
        log.record(parts.step(xs[i], ys[i]))


def validate(parts: Parts, val_ids: Tensor, seq_len: int) -> tuple[float, float]:
    """The epoch's validation loss (nats per token): on the whole split, and on the study's one random
    batch (its own generator's next draw)."""
    val = windowed_nll(parts.model, val_ids, seq_len)
    val_x, val_y = parts.val_batches.batches(1)  # (1, B, T)
    return val.mean, batch_nll(parts.model, val_x[0].to(parts.device), val_y[0].to(parts.device))


def token_ids(run: RunSettings, tokenizer: Tokenizer, train_text: str, val_text: str) -> tuple[Tensor, Tensor]:
    """Both splits as token ids (int64); TrainingError when the validation split cannot fill a window."""
    train_ids = torch.tensor(tokenizer.encode(train_text), dtype=torch.long)
    val_ids = torch.tensor(tokenizer.encode(val_text), dtype=torch.long)
    if val_ids.numel() < 2:
        raise TrainingError("the validation split encodes to fewer than 2 tokens; expected a longer corpus")
    if run.train.seq_len >= val_ids.numel():
        raise TrainingError(f"train.seq_len {run.train.seq_len} is longer than the validation split "
                            f"({val_ids.numel()} tokens) can fill once; expected at most {val_ids.numel() - 1}")
    return train_ids, val_ids


def run_fingerprint(run: RunSettings, tokenizer: Tokenizer, train_ids: Tensor, val_ids: Tensor) -> str:
    """A hash of everything that determines the run, so a resume file from another run is ignored."""
    digest = hashlib.sha256()
    digest.update(json.dumps({**run.identity(), "tokenizer": tokenizer.identity}, sort_keys=True).encode())
    digest.update(train_ids.numpy().tobytes())
    digest.update(val_ids.numpy().tobytes())
    return digest.hexdigest()


def share_cores(run: RunSettings, parts: Parts) -> None:
    """On the CPU, hand the core share (`rnnlm.compute.threads`) the probe it runs before this run
    first changes its thread count as other runs come and go: one step's gradients at one thread and
    at every core must agree. A run alone on its machine never computes it."""
    if run.device.type != "cpu":
        return
    batch = (run.train.batch_size, run.train.seq_len, run.config.vocab_size)
    threads.check_with(lambda: probe_gradients(parts.model, *batch))


def probe_gradients(model: torch.nn.Module, batch_size: int, seq_len: int, vocab: int) -> list[Tensor]:
    """One step's gradients on a copy of `model` (no dropout) for a fixed random batch of the run's
    shape (batch_size, seq_len): what the core share's probe computes at two thread counts. The model,
    its gradients and the random generators are left as they were."""
    probe = copy.deepcopy(model).eval()
    tokens = torch.randint(vocab, (batch_size, seq_len + 1), generator=torch.Generator().manual_seed(0))
    logits, _ = probe(tokens[:, :-1])  # (B, T, V)
    torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1)).backward()
    return [p.grad for p in probe.parameters() if p.grad is not None]
