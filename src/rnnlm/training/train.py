"""Train one model as the study does, repeatably, resumable after an interruption.

In:  the validated params, the selected model's name, its tokenizer, and the train/validation texts.
Out: a `Checkpoint` (weights, optimizer, config, tokenizer identity, params, and the weights after
epoch 1, for the evaluation's first-epoch comparison) and a `History` of per-step and per-epoch
metrics.

The study's recipe: AdamW (weight decay from params), CosineAnnealingLR stepped once per epoch with
T_max = epochs, cross-entropy, gradient-norm clipping, random windows of the training split drawn
by a seeded generator. Unlike the study, the validation loss is measured on the whole validation
split (consecutive windows of the sequence length, each from a zero state) after every epoch; the
study's own estimator, the loss on one random validation batch, is recorded beside it
(`val_batch_loss`), drawn by a generator of its own so that training is the same with or without it.

Each optimizer step is `rnnlm.training.step`'s: it never waits on the device (the losses are read once
every `train.check_every` steps), and on CUDA it is replayed as one captured CUDA graph.

After each completed epoch, and inside an epoch at the end of a block of `train.check_every` steps
once `save_every_s` seconds have passed since the last write, the whole run state (weights,
optimizer, scheduler, the random generators, the history, the epoch's progress) is written to a
resume file (`rnnlm.training.resume`); rerunning with the same params and inputs continues from there and ends bit-identical
(on the CPU) to a run that was never interrupted. A block boundary is a point where nothing is in
flight: the next block draws its windows afresh from the saved generator.
"""

from __future__ import annotations

import copy
import hashlib
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from tqdm import tqdm

from rnnlm.compute import cpu, gemm_choice, threads
from rnnlm.models.checkpoint import Checkpoint
from rnnlm.compute.device import device_for
from rnnlm.errors import RnnlmError
from rnnlm.evaluation.scoring import batch_nll, windowed_nll
from rnnlm.models.state import from_lists, to_lists
from rnnlm.models.kinds import build_model, count_parameters
from rnnlm.params import Params, as_dict, training_settings
from rnnlm.scale import quick
from rnnlm.data.tokenizers import Tokenizer
from rnnlm.timing import StageClock, part_of
from rnnlm.training.progress import EpochProgress, History, Progress
from rnnlm.training.resume import ResumeStore, check_payload
from rnnlm.training.step import (EagerStep, GraphStep, LossLog, NonFiniteLoss, make_optimizer, make_training_step,
                                 replays_a_graph)


SAVE_EVERY_S = 600.0  # inside an epoch: a large model's CPU epoch is long, and each save writes the whole run state


class TrainingError(RnnlmError):
    """Training cannot start or cannot go on (a split too short, a non-finite loss)."""


def steps_per_epoch(steps: int, scale: float) -> int:
    """The entry's steps per epoch times `train.steps_scale`, rounded, at least 1."""
    return max(1, round(steps * scale))


class WindowSampler:
    """Random (inputs, targets) windows of a token sequence, from its own seeded generator."""

    def __init__(self, tokens: Tensor, batch_size: int, seq_len: int, seed: int):
        if tokens.numel() < seq_len + 1:
            raise TrainingError(
                f"the training split has {tokens.numel()} tokens; train.seq_len {seq_len} needs at least {seq_len + 1}"
            )
        self.tokens, self.batch_size, self.seq_len = tokens, batch_size, seq_len
        self.generator = torch.Generator().manual_seed(seed)
        self._offsets = torch.arange(seq_len + 1)

    def batches(self, n: int) -> tuple[Tensor, Tensor]:
        """n batches at once: x, y (n, B, T), y being x shifted by one token. The same windows as n
        draws of one batch each (the generator draws the starts in order either way)."""
        starts = torch.randint(self.tokens.numel() - self.seq_len, (n, self.batch_size), generator=self.generator)
        chunk = self.tokens[starts[..., None] + self._offsets]  # (n, B, T + 1)
        return chunk[..., :-1], chunk[..., 1:]


class StreamSampler:
    """The `train.state: carried` recipe's batches: the token sequence cut into `batch_size`
    contiguous streams, row b of each batch the next window of `seq_len` tokens of stream b, read in
    order; after the last whole window the streams start again from their beginning (`fresh`: the
    state must be reset there). Where a run starts in the streams is drawn from its seed."""

    def __init__(self, tokens: Tensor, batch_size: int, seq_len: int, seed: int):
        length = tokens.numel() // batch_size
        if length < seq_len + 1:
            raise TrainingError(f"the training split has {tokens.numel()} tokens: {batch_size} streams of {length}, "
                                f"shorter than train.seq_len {seq_len} + 1; expected a longer split or a smaller batch")
        self.streams = tokens[: batch_size * length].view(batch_size, length)  # (B, L)
        self.seq_len, self.windows = seq_len, (length - 1) // seq_len  # whole windows per pass
        self.generator = torch.Generator().manual_seed(seed)
        self.position = int(torch.randint(self.windows, (1,), generator=self.generator))  # the next window
        self.fresh: list[bool] = []

    def batches(self, n: int) -> tuple[Tensor, Tensor]:
        """The next n batches: x, y (n, B, T); `fresh[i]` says whether batch i starts a pass."""
        index = (self.position + torch.arange(n)) % self.windows  # (n,)
        starts = index[:, None] * self.seq_len + torch.arange(self.seq_len + 1)  # (n, T + 1)
        chunk = self.streams[:, starts].permute(1, 0, 2)  # (n, B, T + 1)
        self.fresh = (index == 0).tolist()
        self.position = int((self.position + n) % self.windows)
        return chunk[..., :-1], chunk[..., 1:]


def run_fingerprint(params: Params, name: str, tokenizer: Tokenizer, train_ids: Tensor, val_ids: Tensor) -> str:
    """A hash of everything that determines the run, so a resume file from another run is ignored."""
    digest = hashlib.sha256()
    settings = {"model": name, "entry": as_dict(params.models[name]), "train": as_dict(training_settings(params, name)),
                "seed": params.seed, "tokenizer": tokenizer.identity}
    digest.update(json.dumps(settings, sort_keys=True).encode())
    digest.update(train_ids.numpy().tobytes())
    digest.update(val_ids.numpy().tobytes())
    return digest.hexdigest()


@dataclass
class _Run:
    """The objects whose state a resume file holds, besides the history and the time spent."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    sampler: WindowSampler | StreamSampler
    val_batches: WindowSampler  # the study's validation estimator: one random batch per epoch
    device: torch.device
    machines: list[dict[str, Any]]  # where it trained: processor, GEMM and the epoch and step it began at
    step: EagerStep | GraphStep  # holds the carried state of `train.state: carried`
    first_epoch_state: dict[str, Tensor] | None = None  # the weights after epoch 1, on the CPU

    def keep_first_epoch(self) -> None:
        """Copy the weights as they are now (after epoch 1) to the CPU."""
        self.first_epoch_state = {k: v.detach().cpu().clone() for k, v in self.model.state_dict().items()}

    def snapshot(self, epoch: int, history: History, seconds: float,
                 progress: EpochProgress | None = None) -> dict[str, Any]:
        """Everything needed to continue exactly as if never stopped: after `epoch` completed epochs
        (`seconds` of training), and `progress` into epoch `epoch + 1` when given."""
        cuda = {"cuda_rng": torch.cuda.get_rng_state(self.device)} if self.device.type == "cuda" else {}
        return {
            "epoch": epoch, "seconds": seconds, "model": self.model.state_dict(),
            "first_epoch_model": self.first_epoch_state,
            "optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
            "sampler_rng": self.sampler.generator.get_state(), "torch_rng": torch.get_rng_state(),
            "val_batch_rng": self.val_batches.generator.get_state(),
            "history_steps": history.steps, "history_epochs": history.epochs, "machines": self.machines, **cuda,
            "partial": None if progress is None else asdict(progress), **self._carried(),
        }

    def _carried(self) -> dict[str, Any]:
        """What `train.state: carried` adds to a snapshot: where the streams are, and the state the
        next window starts from (on the CPU; none at a pass's start)."""
        if not isinstance(self.sampler, StreamSampler):
            return {}
        state = getattr(self.step, "state", None)
        return {"stream_position": self.sampler.position,
                "carried_state": None if state is None else [[t.cpu() for t in layer] for layer in to_lists(state)]}

    def restore(self, saved: dict[str, Any]) -> tuple[History, float, EpochProgress]:
        """Load a `snapshot` back -> its history, seconds and the next epoch's progress."""
        self.model.load_state_dict(saved["model"])
        self.optimizer.load_state_dict(saved["optimizer"])
        self.scheduler.load_state_dict(saved["scheduler"])
        self.first_epoch_state = saved.get("first_epoch_model")
        self.sampler.generator.set_state(saved["sampler_rng"])
        self.val_batches.generator.set_state(saved["val_batch_rng"])
        torch.set_rng_state(saved["torch_rng"])
        if self.device.type == "cuda" and "cuda_rng" in saved:
            torch.cuda.set_rng_state(saved["cuda_rng"], self.device)
        progress = EpochProgress(**(saved.get("partial") or {}))  # none in a file written at an epoch's end
        if isinstance(self.sampler, StreamSampler):
            self.sampler.position = saved["stream_position"]
            carried = saved.get("carried_state")
            self.step.state = None if carried is None else from_lists([[t.to(self.device) for t in layer]
                                                                       for layer in carried])
        here = self.machines[-1]
        before = saved.get("machines") or [{**here, "processor": "unknown", "gemm": "unknown"}]
        if (before[-1]["processor"], before[-1]["gemm"]) == (here["processor"], here["gemm"]):
            self.machines = before
        else:  # another CPU or GEMM library takes over from here: its last bits round otherwise
            self.machines = [*before, {**here, "from_epoch": saved["epoch"] + 1, "from_step": progress.steps}]
        return History(steps=saved["history_steps"], epochs=saved["history_epochs"]), saved["seconds"], progress


def processor_name(device: torch.device) -> str:
    """The model name of what runs on `device`: the GPU's on CUDA, else the CPU's with its generation
    where /proc/cpuinfo gives one ("AMD EPYC (family 26 model 2 stepping 1)"): a virtual machine
    names a Zen 3 and a Zen 5 alike, and a study's seeds may come from both."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    name = cpu.cpu_model() or platform.processor() or platform.machine()
    generation = cpu.cpu_generation()
    return f"{name} ({generation})" if generation else name


def products_gemm(device: torch.device) -> str:
    """The libraries that run the float32 matrix products on `device` (`rnnlm.compute.gemm_choice.gemm_for`):
    "mkl", "onednn", or "LARGE:STEP" on the CPU, "cublas" on CUDA."""
    gemms = gemm_choice.gemm_for(device)
    return str(gemms) if gemms else ("cublas" if device.type == "cuda" else "aten")


def val_batch_seed(seed: int) -> int:
    """The seed of the generator that draws the study's validation batch each epoch: derived from
    `seed` but its own stream, so drawing it changes nothing that training draws."""
    return int.from_bytes(hashlib.sha256(f"study validation batch {seed}".encode()).digest()[:8], "little") >> 1


@dataclass
class TrainResult:
    checkpoint: Checkpoint
    history: History
    device: str
    gemm: str  # the libraries of the float32 products: "mkl", "onednn" or "LARGE:STEP" on the CPU, "cublas" on CUDA
    processor: str  # the CPU's or GPU's model name
    parameters: int
    seconds: float
    resume: ResumeStore  # the run's resume file, kept until the caller has every output in place
    machines: list[dict[str, Any]]  # each machine it trained on, from which epoch and step; one for most runs
    state: str = "reset"  # train.state: how the state went from window to window


def probe_gradients(model: torch.nn.Module, batch_size: int, seq_len: int, vocab: int) -> list[Tensor]:
    """One step's gradients on a copy of `model` (no dropout) for a fixed random batch of the run's
    shape (batch_size, seq_len): what `threads.verify` computes at two thread counts. The model, its
    gradients and the random generators are left as they were."""
    probe = copy.deepcopy(model).eval()
    tokens = torch.randint(vocab, (batch_size, seq_len + 1), generator=torch.Generator().manual_seed(0))
    logits, _ = probe(tokens[:, :-1])  # (B, T, V)
    torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1)).backward()
    return [p.grad for p in probe.parameters() if p.grad is not None]


def train(
    params: Params,
    name: str,
    tokenizer: Tokenizer,
    train_text: str,
    val_text: str,
    resume_dir: Path | None = None,
    on_epoch_end: Callable[[int], None] | None = None,
    progress: bool = True,
    save_every_s: float = SAVE_EVERY_S,
    clock: StageClock | None = None,
    device: torch.device | None = None,
    on_progress: Callable[[Progress], None] | None = None,
) -> TrainResult:
    """Train the entry `name` of `params.models`; see the module docstring for the recipe and for
    when the resume file in `resume_dir` is written (`save_every_s`: inside an epoch). The file is
    left in place: the caller removes it (`result.resume.clear()`) once it has written every output,
    so a failure while writing them loses no training. `clock`: times the per-epoch validation.
    `device`: the one `rnnlm.compute.device.device_for` gave for these settings (None: asked here).
    `on_progress`: called with the run's `Progress` after each save of its resume file (each epoch's
    end and the saves inside an epoch), for a report of the run while it trains."""
    entry, settings = params.models[name], training_settings(params, name)
    carried = settings.state == "carried"  # never for the fixed-window model: training_settings refuses it
    device = device or device_for(settings)
    train_ids = torch.tensor(tokenizer.encode(train_text), dtype=torch.long)
    val_ids = torch.tensor(tokenizer.encode(val_text), dtype=torch.long)
    if val_ids.numel() < 2:
        raise TrainingError("the validation split encodes to fewer than 2 tokens; expected a longer corpus")
    if settings.seq_len >= val_ids.numel():
        raise TrainingError(f"train.seq_len {settings.seq_len} is longer than the validation split "
                            f"({val_ids.numel()} tokens) can fill once; expected at most {val_ids.numel() - 1}")
    n_steps = steps_per_epoch(entry.steps_per_epoch, settings.steps_scale)

    torch.manual_seed(params.seed)  # weights and dropout masks
    model = build_model(entry.model_config(tokenizer.vocab_size)).to(device)
    graph = replays_a_graph(settings.cuda_graph, device, carried)
    optimizer = make_optimizer(model, entry.lr, settings.weight_decay, device, graph)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=entry.epochs)
    sampler = (StreamSampler if carried else WindowSampler)(train_ids, settings.batch_size, settings.seq_len,
                                                            params.seed)
    val_batches = WindowSampler(val_ids, settings.batch_size, settings.seq_len, val_batch_seed(params.seed))
    history, start_epoch, seconds, resumed = History(), 1, 0.0, EpochProgress()

    gemm, processor = products_gemm(device), processor_name(device)
    store = ResumeStore(resume_dir, name, params.seed, run_fingerprint(params, name, tokenizer, train_ids, val_ids),
                        device.type, gemm, processor, settings.steps_scale)
    here = {"device": device.type, "processor": processor, "gemm": gemm, "from_epoch": 1, "from_step": 0}
    step_fn = make_training_step(model, optimizer, settings.grad_clip, device, graph, carry=carried)
    if device.type == "cpu":  # may this run change its threads as other runs come and go? (compute/threads.py)
        if not threads.verify(lambda: probe_gradients(model, settings.batch_size, settings.seq_len,
                                                      tokenizer.vocab_size)) and threads.SHARE.probed:
            print(f"note: this run computes on {torch.get_num_threads()} threads throughout: {threads.SHARE.why_fixed}")
    run = _Run(model, optimizer, scheduler, sampler, val_batches, device, [here], step_fn)
    saved = store.load(lambda state: check_payload(state, model.state_dict(), optimizer.state_dict(), entry.epochs,
                                                   n_steps, ("stream_position",) if carried else ()))
    if saved is not None:
        history, seconds, resumed = run.restore(saved)
        start_epoch = saved["epoch"] + 1
        where = (f"at step {resumed.steps}/{n_steps} of epoch {start_epoch}" if resumed.steps
                 else f"after epoch {saved['epoch']}")
        print(f"resuming {name} {where} from {store.path}")
        if len(run.machines) > 1 and run.machines[-1]["from_epoch"] == start_epoch:
            was = run.machines[-2]
            print(f"note: it trained on {was['processor']} with {was['gemm']} so far and goes on here on {processor} "
                  f"with {gemm}: the last bits of the arithmetic differ from here on; the training metrics say so")

    tokens_per_step = settings.batch_size * settings.seq_len
    last_save = time.perf_counter()
    for epoch in range(start_epoch, entry.epochs + 1):
        model.train()
        done = resumed if epoch == start_epoch else EpochProgress()  # steps, losses, seconds before this run
        epoch_start, losses = time.perf_counter() - done.seconds, done.losses
        lr = float(optimizer.param_groups[0]["lr"])
        log = LossLog(settings.check_every, device, first_step=len(history.steps) + 1)
        # A bar on a terminal only: in a log (a queued experiment, a redirect) each refresh would be a
        # line of its own; there the epoch's summary line below is the progress report.
        bar = tqdm(total=n_steps, initial=done.steps, desc=f"{name} epoch {epoch}/{entry.epochs}", leave=False,
                   mininterval=1.0, dynamic_ncols=True, disable=not (progress and sys.stderr.isatty()))
        for first in range(done.steps, n_steps, settings.check_every):
            block_start = time.perf_counter()
            size = min(settings.check_every, n_steps - first)
            xs, ys = (t.to(device) for t in sampler.batches(size))  # (size, B, T): one copy per block
            for i in range(size):
                if carried and (sampler.fresh[i] or first + i == 0):  # a pass's or an epoch's first window
                    step_fn.reset_state()
                threads.refresh()  # this run's share of the cores, counted again at most once a second
                log.record(step_fn(xs[i], ys[i]))
            try:  # the host waits for the device here only, once a block
                block = log.read()
            except NonFiniteLoss as error:  # resumed, the same state would reach the same loss: start afresh
                store.clear()
                raise TrainingError(f"{error} (epoch {epoch}); expected finite losses (a smaller lr, or another seed); "
                                    "its resume file is removed, so a rerun starts afresh") from None
            rate = tokens_per_step * size / (time.perf_counter() - block_start)  # the block's mean rate
            for loss_value in block:
                history.steps.append({"step": len(history.steps) + 1, "epoch": epoch, "train_loss": loss_value,
                                      "lr": lr, "tokens_per_second": rate})
            losses += block
            bar.update(size)
            bar.set_postfix(loss=f"{block[-1]:.3f}", tok_s=f"{rate:,.0f}")
            if first + size < n_steps and time.perf_counter() - last_save >= save_every_s:
                progress_now = EpochProgress(first + size, losses, time.perf_counter() - epoch_start)
                store.save(run.snapshot(epoch - 1, history, seconds, progress_now), entry.epochs)
                last_save = time.perf_counter()
                if on_progress is not None:
                    on_progress(Progress(history, seconds, entry.epochs, device.type, gemm, processor,
                                         count_parameters(model), run.machines, settings.state))
        bar.close()
        scheduler.step()
        with part_of(clock, "per-epoch validation"):
            val = windowed_nll(model, val_ids, settings.seq_len)
            val_x, val_y = val_batches.batches(1)  # (1, B, T)
            val_batch = batch_nll(model, val_x[0].to(device), val_y[0].to(device))
        epoch_seconds = time.perf_counter() - epoch_start
        seconds += epoch_seconds
        history.epochs.append({"step": len(history.steps), "epoch": epoch, "train_loss": statistics.fmean(losses),
                               "val_loss": val.mean, "lr": lr, "seconds": epoch_seconds,
                               "val_batch_loss": val_batch})
        if epoch == 1:
            run.keep_first_epoch()
        # A full run saves after every epoch; a quick one (seconds an epoch) as inside an epoch, every
        # `save_every_s`: writing its whole state each epoch took a tenth of its time.
        if not quick(settings.steps_scale) or time.perf_counter() - last_save >= save_every_s:
            with part_of(clock, "resume file"):
                store.save(run.snapshot(epoch, history, seconds), entry.epochs)
            last_save = time.perf_counter()
        # After the save: a line in the log means the epoch is done and kept.
        print(f"{name} epoch {epoch:02d}/{entry.epochs} | train {statistics.fmean(losses):.4f} | "
              f"val {val.mean:.4f} | lr {lr:.2e} | {epoch_seconds:.1f}s", flush=True)
        if on_progress is not None:
            with part_of(clock, "live report"):
                on_progress(Progress(history, seconds, entry.epochs, device.type, gemm, processor,
                                     count_parameters(model), run.machines, settings.state))
        if on_epoch_end is not None:
            on_epoch_end(epoch)

    checkpoint = Checkpoint(
        model_name=name,
        model_config=entry.model_config(tokenizer.vocab_size),
        model_state={k: v.detach().cpu() for k, v in model.state_dict().items()},
        tokenizer_state=tokenizer.state(),
        params=as_dict(params),
        step=len(history.steps),
        epoch=entry.epochs,
        optimizer_state=optimizer.state_dict(),
        first_epoch_state=run.first_epoch_state,
    )
    return TrainResult(checkpoint, history, device.type, gemm, processor, count_parameters(model), seconds, store,
                       run.machines, settings.state)
