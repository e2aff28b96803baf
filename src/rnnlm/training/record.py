"""What a training run records beside its loop: its resume file and when it is written, the machines
it trained on, the weights after its first epoch, its live figures, its progress bar and epoch
lines, and where its time went. The loop (`rnnlm.training.train`) tells the record where it stands at the end of every
block of `train.check_every` steps and of every epoch; the record never changes what the loop
computes.

In:  the run's `RunSettings` and `Parts`, its fingerprint (`rnnlm.training.train.run_fingerprint`),
     and at each end of a block or an epoch its history, seconds and progress.
Out: `begin` -> where the run starts (epoch 1, or where its resume file left it, restored bit for
     bit); saves of the resume file (`rnnlm.training.resume`) after every epoch and, inside an epoch,
     at the end of a block once `save_every_s` seconds have passed (a quick run: on that cadence
     only); the `Progress` handed to `on_progress` after each save; `result` -> the `TrainResult`.

A block's end is a point where nothing is in flight: the next block draws its windows afresh from
the saved generator, so a run resumed there ends bit-identical (on the CPU) to one never stopped.
"""

from __future__ import annotations

import platform
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from tqdm import tqdm

from rnnlm.compute import backend, cpu
from rnnlm.data.tokenizers import Tokenizer
from rnnlm.errors import TrainingError
from rnnlm.models.checkpoint import Checkpoint
from rnnlm.models.kinds import count_parameters
from rnnlm.scale import quick
from rnnlm.stage_clock import StageClock, part_of
from rnnlm.training.parts import Parts
from rnnlm.training.progress import EpochProgress, History, Progress
from rnnlm.training.resume import ResumeStore, check_payload, code_fingerprint
from rnnlm.training.settings import RunSettings
from rnnlm.training.step import NonFiniteLoss

SAVE_EVERY_S = 600.0  # inside an epoch: a large model's CPU epoch is long, and each save writes the whole run state


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
    """The libraries that run the float32 matrix products on `device` (`rnnlm.compute.backend.gemm_for`):
    "mkl", "onednn", "LARGE:NARROW" or "LARGE:NARROW:ONE_ROW" on the CPU (`Gemms`), "cublas" on CUDA."""
    gemms = backend.gemm_for(device)
    return str(gemms) if gemms else ("cublas" if device.type == "cuda" else "aten")


@dataclass
class TrainResult:
    checkpoint: Checkpoint
    history: History
    device: str
    gemm: str  # the libraries of the float32 products: as `products_gemm` names them
    processor: str  # the CPU's or GPU's model name
    parameters: int
    seconds: float
    resume: ResumeStore  # the run's resume file, kept until the caller has every output in place
    machines: list[dict[str, Any]]  # each machine it trained on, from which epoch and step; one for most runs
    state: str = "reset"  # train.state: how the state went from window to window


@dataclass(frozen=True)
class Start:
    """Where a run starts: the first epoch to train, how far into it, and what came before."""

    epoch: int
    progress: EpochProgress
    history: History
    seconds: float  # of training before this process


class RunRecord:
    """The record of one run (module docstring). `resume_dir`: where its resume file goes (None: no
    file); `clock`: times the per-epoch validation, the saves and the live report; `on_progress`:
    called with the run's `Progress` after each save; `on_epoch_end`: called with the epoch's number
    once it is recorded (a test stops a run there); `bar`: a progress bar per epoch, shown on a
    terminal only (in a log each refresh would be a line; there the epoch's line reports)."""

    def __init__(self, resume_dir: Path | None = None, save_every_s: float = SAVE_EVERY_S,
                 clock: StageClock | None = None, on_progress: Callable[[Progress], None] | None = None,
                 on_epoch_end: Callable[[int], None] | None = None, bar: bool = True):
        self.resume_dir, self.save_every_s, self.clock = resume_dir, save_every_s, clock
        self.on_progress, self.on_epoch_end = on_progress, on_epoch_end
        self.show_bar, self.bar = bar and sys.stderr.isatty(), None  # the epoch's bar, made at its first block end
        self.first_epoch_state: dict[str, Tensor] | None = None  # the weights after epoch 1, on the CPU

    def begin(self, run: RunSettings, parts: Parts, fingerprint: str) -> Start:
        """The run's start: afresh, or from its resume file, whose state is restored into `parts`."""
        self.run, self.parts = run, parts
        self.gemm, self.processor = products_gemm(run.device), processor_name(run.device)
        self.store = ResumeStore(self.resume_dir, run.name, run.seed, fingerprint, run.device.type, self.gemm,
                                 self.processor, run.train.steps_scale, code_fingerprint(),
                                 backend.chosen_by_hand(run.device))
        self.machines: list[dict[str, Any]] = [{"device": run.device.type, "processor": self.processor,
                                                "gemm": self.gemm, **backend.arithmetic(run.device),
                                                "from_epoch": 1, "from_step": 0}]
        saved = self.store.load(lambda state: check_payload(
            state, parts.model.state_dict(), parts.optimizer.state_dict(), run.epochs, run.steps_per_epoch,
            parts.required_keys()))
        self.last_save = time.perf_counter()
        if saved is None:
            return Start(1, EpochProgress(), History(), 0.0)
        start = self._restore(saved)
        where = (f"at step {start.progress.steps}/{run.steps_per_epoch} of epoch {start.epoch}" if start.progress.steps
                 else f"after epoch {start.epoch - 1}")
        print(f"resuming {run.name} {where} from {self.store.path}")
        if len(self.machines) > 1 and self.machines[-1]["from_epoch"] == start.epoch:
            was = self.machines[-2]
            print(f"note: it trained on {was['processor']} with {was['gemm']} so far and goes on here on "
                  f"{self.processor} with {self.gemm}: the last bits of the arithmetic differ from here on; the "
                  "training metrics say so")
        return start

    def losses(self, read: Callable[[], list[float]], epoch: int) -> list[float]:
        """The block's losses (`read`: the loss log's read); a non-finite one ends the run, and its resume
        file with it: resumed, the same state would reach the same loss again."""
        try:
            return read()
        except NonFiniteLoss as error:
            self.store.clear()
            raise TrainingError(f"{error} (epoch {epoch}); expected finite losses (a smaller lr, or another seed); "
                                "its resume file is removed, so a rerun starts afresh") from None

    def block_end(self, epoch: int, history: History, seconds: float, progress: EpochProgress) -> None:
        """Inside epoch `epoch`, after `progress.steps` of its steps: the bar moved on, and a save once
        `save_every_s` have passed."""
        self._show(epoch, progress.steps, history.steps[-1])
        if progress.steps < self.run.steps_per_epoch and time.perf_counter() - self.last_save >= self.save_every_s:
            self._save(epoch - 1, history, seconds, progress)
            self._report(history, seconds)

    def _show(self, epoch: int, steps: int, last: dict[str, Any]) -> None:
        """The epoch's bar at `steps` of its steps, with the last step's loss and its block's rate."""
        if not self.show_bar:
            return
        if self.bar is None:
            self.bar = tqdm(total=self.run.steps_per_epoch, desc=f"{self.run.name} epoch {epoch}/{self.run.epochs}",
                            leave=False, mininterval=1.0, dynamic_ncols=True)
        self.bar.update(steps - self.bar.n)
        self.bar.set_postfix(loss=f"{last['train_loss']:.3f}", tok_s=f"{last['tokens_per_second']:,.0f}")

    def validation(self):
        """Times the per-epoch validation (a context manager)."""
        return part_of(self.clock, "per-epoch validation")

    def epoch_end(self, epoch: int, history: History, seconds: float, line: str) -> None:
        """After epoch `epoch`: its weights kept if it is the first, the resume file saved (every epoch
        at full scale; a quick run on the save cadence: writing its state each epoch took a tenth of
        its time), then its `line` printed (a line in the log means the epoch is done and kept)."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        if epoch == 1:
            self.first_epoch_state = {k: v.detach().cpu().clone() for k, v in self.parts.model.state_dict().items()}
        if not quick(self.run.train.steps_scale) or time.perf_counter() - self.last_save >= self.save_every_s:
            with part_of(self.clock, "resume file"):
                self._save(epoch, history, seconds)
        print(line, flush=True)
        if self.on_progress is not None:
            with part_of(self.clock, "live report"):
                self._report(history, seconds)
        if self.on_epoch_end is not None:
            self.on_epoch_end(epoch)

    def result(self, tokenizer: Tokenizer, history: History, seconds: float) -> TrainResult:
        """The finished run: its checkpoint (the final weights, the optimizer, the weights after epoch 1)
        and everything its training report says. Its resume file stays until the caller clears it."""
        model, run = self.parts.model, self.run
        checkpoint = Checkpoint(
            model_name=run.name, model_config=run.config,
            model_state={k: v.detach().cpu() for k, v in model.state_dict().items()},
            tokenizer_state=tokenizer.state(), params=run.params, step=len(history.steps), epoch=run.epochs,
            optimizer_state=self.parts.optimizer.state_dict(), first_epoch_state=self.first_epoch_state)
        return TrainResult(checkpoint, history, run.device.type, self.gemm, self.processor, count_parameters(model),
                           seconds, self.store, self.machines, run.train.state)

    # ----- the resume file ------------------------------------------------------------------------

    def _save(self, epoch: int, history: History, seconds: float, progress: EpochProgress | None = None) -> None:
        self.store.save(self._snapshot(epoch, history, seconds, progress), self.run.epochs)
        self.last_save = time.perf_counter()

    def _report(self, history: History, seconds: float) -> None:
        if self.on_progress is not None:
            self.on_progress(Progress(history, seconds, self.run.epochs, self.run.device.type, self.gemm,
                                      self.processor, count_parameters(self.parts.model), self.machines,
                                      self.run.train.state))

    def _snapshot(self, epoch: int, history: History, seconds: float,
                  progress: EpochProgress | None = None) -> dict[str, Any]:
        """Everything needed to continue exactly as if never stopped: after `epoch` completed epochs
        (`seconds` of training), and `progress` into epoch `epoch + 1` when given."""
        return {
            "epoch": epoch, "seconds": seconds, **self.parts.state_dict(), "first_epoch_model": self.first_epoch_state,
            "history_steps": history.steps, "history_epochs": history.epochs, "machines": self.machines,
            "partial": None if progress is None else asdict(progress),
        }

    def _restore(self, saved: dict[str, Any]) -> Start:
        """Load a `_snapshot` back into the parts -> where the run starts."""
        self.parts.load_state_dict(saved)
        self.first_epoch_state = saved.get("first_epoch_model")
        progress = EpochProgress(**(saved.get("partial") or {}))  # none in a file written at an epoch's end
        here = self.machines[-1]
        before = saved.get("machines") or [{**here, "processor": "unknown", "gemm": "unknown"}]
        if all(before[-1].get(k) == v for k, v in here.items() if k not in ("from_epoch", "from_step")):
            self.machines = before
        else:  # another CPU, GEMM library or MKL mode takes over from here: its last bits round otherwise
            self.machines = [*before, {**here, "from_epoch": saved["epoch"] + 1, "from_step": progress.steps}]
        return Start(saved["epoch"] + 1, progress, History(steps=saved["history_steps"],
                                                           epochs=saved["history_epochs"]), saved["seconds"])
