"""Would training several seeds in one process pay on a GPU? One seed's training step against S
seeds' steps run together, at the study's training shape (batch 64 x 128 time steps).

    python -m benchmarks.seed_streams --mps --markdown reports/gpu/seed-streams.md --json reports/gpu/seed-streams.json
    PYTHONPATH=src python -m benchmarks.seed_streams --quick      # tiny shapes, any device: checks it runs

Today a GPU trains one seed at a fraction of its width: a step's products are (64 x hidden) by
(hidden x gates), too thin to fill the SMs, and between them a few small kernels. Per model
(`--models`; random weights and tokens, as speed does not depend on them), the training tokens per
second, all seeds together, of:

- `one seed`: one seed's step replayed as a CUDA graph (`GraphStep`), as the train stage runs it;
- `S seeds, one graph, a stream each`: S seeds' steps captured in one CUDA graph, each on a stream
  of its own, so that the GPU may run their kernels side by side; one replay steps every seed;
- `S seeds, one graph, in turn`: the same S steps captured on one stream: what one launch for S
  steps buys without their kernels overlapping;
- `1 process` and `S processes`: workers that each replay one seed's graph, started together (with
  `--mps` under a CUDA MPS daemon this script starts, as the lent calls train their runs; without
  it the GPU time-slices the processes). The processes run first, before this process touches
  CUDA, so that every one of them is a client of the daemon.

The in-process contenders are timed side by side (medians of --repeats rounds of --steps calls);
each worker times --steps steps from a common start, and the figure is all their tokens over the
slowest worker's seconds. Each one-graph contender is also checked: each seed's losses, step for
step, against the same seed stepped alone (the largest difference is reported). Without CUDA the
graphs are eager steps and the streams one: `--quick` checks the plumbing, not a speed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import Tensor

from rnnlm.memory import keep_freed_memory
from rnnlm.models.config import ModelConfig
from rnnlm.models.language_model import RecurrentLM
from rnnlm.reporting.markdown import table_head, table_row
from rnnlm.training.step import EagerStep, make_optimizer, make_training_step

from benchmarks.timing import FULL, QUICK, machine, machine_line, model_configs, side_by_side, synchronize, write_report

REPO = Path(__file__).resolve().parents[1]
MODELS = ["astra_gamma", "scribe_gamma", "leviathan"]


def seed_data(config: ModelConfig, seed: int, batch: int, seq_len: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """One seed's fixed batch: inputs and targets (batch, seq_len) on `device`."""
    data = torch.randint(config.vocab_size, (batch, seq_len + 1), generator=torch.Generator().manual_seed(seed))
    return data[:, :-1].contiguous().to(device), data[:, 1:].contiguous().to(device)


def seed_step(config: ModelConfig, seed: int, device: torch.device) -> EagerStep:
    """One seed's model and optimizer (capturable on CUDA), stepping eagerly: a `SeedsGraph` part."""
    torch.manual_seed(seed)
    model = RecurrentLM(config).to(device).train()
    return EagerStep(model, make_optimizer(model, 1e-3, 0.01, device, device.type == "cuda"), grad_clip=1.0)


def alone_step(config: ModelConfig, seed: int, device: torch.device):
    """One seed's step as the train stage makes it (`make_training_step`: a CUDA graph on CUDA)."""
    part = seed_step(config, seed, device)
    return make_training_step(part.model, part.optimizer, 1.0, device, device.type == "cuda")


class SeedsGraph:
    """S seeds' steps as one call: on CUDA captured in one graph after `warmup` eager calls, each
    seed's step on a stream of its own (`streams`) or all on one; elsewhere, eager steps in turn.
    A call returns each seed's loss (S,), on the device."""

    def __init__(self, steps: list[EagerStep], batches: list[tuple[Tensor, Tensor]], streams: bool, warmup: int = 3):
        self.steps, self.batches, self.warmup = steps, batches, warmup
        self.cuda = batches[0][0].device.type == "cuda"
        self.streams = [torch.cuda.Stream() for _ in steps] if self.cuda and streams else None
        self.calls, self.graph, self.losses = 0, None, None

    def _each(self) -> Tensor:
        """Every seed's step, on its own stream where there are streams: (S,)."""
        if self.streams is None:
            return torch.stack([step(x, y) for step, (x, y) in zip(self.steps, self.batches)])
        origin, losses = torch.cuda.current_stream(), []
        for step, (x, y), stream in zip(self.steps, self.batches, self.streams):
            stream.wait_stream(origin)
            with torch.cuda.stream(stream):
                losses.append(step(x, y))
        for stream in self.streams:
            origin.wait_stream(stream)
        return torch.stack(losses)

    def __call__(self) -> Tensor:
        self.calls += 1
        if not self.cuda:
            return self._each()
        if self.graph is None and self.calls <= self.warmup:
            side = torch.cuda.Stream()  # eager calls before a capture run on a side stream
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                losses = self._each()
            torch.cuda.current_stream().wait_stream(side)
            return losses
        if self.graph is None:
            for step in self.steps:
                step.optimizer.zero_grad(set_to_none=True)  # the graph allocates the gradients it writes
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.losses = self._each()
        self.graph.replay()
        return self.losses.clone()


def agreement(config: ModelConfig, seeds: int, settings, device: torch.device, streams: bool, calls: int) -> float:
    """The largest difference between a seed's loss stepped inside `SeedsGraph` and stepped alone
    (`make_training_step`, as the train stage), over `calls` steps of every seed, without dropout
    (its masks are drawn in another order when the seeds step together)."""
    config = dataclasses.replace(config, dropout=0.0)
    batches = [seed_data(config, s, settings.batch, settings.seq_len, device) for s in range(seeds)]
    together = SeedsGraph([seed_step(config, s, device) for s in range(seeds)], batches, streams)
    joint = torch.stack([together() for _ in range(calls)]).cpu()  # (calls, S)
    alone = []
    for s, (x, y) in enumerate(batches):
        step = alone_step(config, s, device)
        alone.append(torch.stack([step(x, y).clone() for _ in range(calls)]).cpu())  # (calls,)
    return float((joint - torch.stack(alone, 1)).abs().max())


def in_process(name: str, config: ModelConfig, seeds: int, settings, device: torch.device) -> list[dict]:
    """The one-seed and one-graph contenders of `name`, timed side by side: rows of tokens per second."""
    one, (x, y) = alone_step(config, 0, device), seed_data(config, 0, settings.batch, settings.seq_len, device)
    batches = [seed_data(config, s, settings.batch, settings.seq_len, device) for s in range(seeds)]
    contenders = {"one seed": (1, lambda: one(x, y))}
    for label, streams in ((f"{seeds} seeds, one graph, a stream each", True), (f"{seeds} seeds, one graph, in turn", False)):
        contenders[label] = (seeds, SeedsGraph([seed_step(config, s, device) for s in range(seeds)], batches, streams))
    medians = side_by_side({label: fn for label, (_, fn) in contenders.items()}, settings.repeats, device)
    tokens = settings.batch * settings.seq_len
    rows = []
    for label, (count, _) in contenders.items():
        check = None if count == 1 else agreement(config, seeds, settings, device, "stream each" in label, 4)
        rows.append({"model": name, "contender": label, "seeds": count, "ms_per_call": medians[label] * 1e3,
                     "tokens_per_second": count * tokens / medians[label], "largest_loss_difference": check})
    return rows


def worker(args: argparse.Namespace) -> None:
    """One process of the processes contender: one seed's step, warmed up, then `--steps` steps timed
    from when the file `--go` appears; prints "ready", then the seconds as JSON."""
    settings = QUICK if args.quick else FULL
    keep_freed_memory()
    device = torch.device(args.device)
    config = model_configs(str(REPO / "params.yaml"), [args.worker], settings.shrink)[args.worker]
    step, (x, y) = alone_step(config, args.seed, device), seed_data(config, args.seed, settings.batch,
                                                                    settings.seq_len, device)
    for _ in range(5):  # the graph captures itself on its fourth call
        step(x, y)
    synchronize(device)
    print("ready", flush=True)
    while not Path(args.go).exists():
        time.sleep(0.001)
    start = time.perf_counter()
    for _ in range(args.steps):
        step(x, y)
    synchronize(device)
    print(json.dumps({"seconds": time.perf_counter() - start}), flush=True)


def processes(name: str, count: int, args: argparse.Namespace, settings) -> dict:
    """`count` workers of `name` started together: all their tokens per second over the slowest one's time."""
    with tempfile.TemporaryDirectory() as tmp:
        go = Path(tmp) / "go"
        command = [sys.executable, "-m", __spec__.name, "--worker", name, "--steps", str(args.steps), "--go", str(go),
                   "--device", args.device] + (["--quick"] if args.quick else [])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))}
        workers = [subprocess.Popen([*command, "--seed", str(s)], stdout=subprocess.PIPE, text=True, env=env, cwd=REPO)
                   for s in range(count)]
        try:
            for w in workers:
                line = w.stdout.readline().strip()
                if line != "ready":
                    raise SystemExit(f"error: a {name} worker did not start (it printed {line!r}); expected 'ready'")
            go.touch()
            seconds = [json.loads(w.communicate()[0])["seconds"] for w in workers]
        finally:
            for w in workers:  # none outlives a failed start
                if w.poll() is None:
                    w.kill()
    tokens = count * args.steps * settings.batch * settings.seq_len
    label = f"{count} process{'es' if count > 1 else ''}" + (" (MPS)" if args.mps else "")
    return {"model": name, "contender": label, "seeds": count, "ms_per_call": max(seconds) / args.steps * 1e3,
            "tokens_per_second": tokens / max(seconds), "largest_loss_difference": None}


def mps_daemon(start: bool) -> None:
    """Start (`start`) or stop a CUDA MPS daemon with pipe and log folders of its own under /tmp."""
    os.environ.update(CUDA_MPS_PIPE_DIRECTORY="/tmp/mps-seeds", CUDA_MPS_LOG_DIRECTORY="/tmp/mps-seeds-log")
    if start:
        if shutil.which("nvidia-cuda-mps-control") is None:
            raise SystemExit("error: --mps: no nvidia-cuda-mps-control on PATH; expected a GPU machine with CUDA MPS")
        for folder in ("/tmp/mps-seeds", "/tmp/mps-seeds-log"):
            os.makedirs(folder, exist_ok=True)
        subprocess.run(["nvidia-cuda-mps-control", "-d"], check=True)
    else:
        subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", text=True, timeout=30)
        for name in ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY"):
            os.environ.pop(name)


def markdown(report: dict) -> str:
    lines = ["# Several seeds in one process", "",
             f"Written by `benchmarks/seed_streams.py` on {report['machine_line']}: training steps at batch "
             f"{report['batch']} x {report['seq_len']}, random weights and tokens; tokens per second of all the seeds "
             f"together (in-process contenders: medians of {report['repeats']} side-by-side rounds; processes: "
             f"{report['steps']} steps each from a common start, over the slowest). × one seed: against the first row.",
             "", *table_head(["model", "contender", "seeds", "ms per call", "tokens/s", "× one seed",
                              "largest loss difference"], "llrrrrr")]
    for row in report["rows"]:
        one = next(r for r in report["rows"] if r["model"] == row["model"] and r["contender"] == "one seed")
        check = row["largest_loss_difference"]
        lines.append(table_row([row["model"], row["contender"], str(row["seeds"]), f"{row['ms_per_call']:,.2f}",
                                f"{row['tokens_per_second']:,.0f}", f"{row['tokens_per_second'] / one['tokens_per_second']:.2f}",
                                "—" if check is None else f"{check:.1e}"]))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=MODELS)
    parser.add_argument("--seeds", type=int, default=5, help="seeds stepped together (S)")
    parser.add_argument("--steps", type=int, default=50, help="steps each worker process times")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--mps", action="store_true", help="run the processes under a CUDA MPS daemon started here")
    parser.add_argument("--quick", action="store_true", help="tiny shapes, two seeds: checks that it runs")
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # a processes contender's model
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--go", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args)
    settings = QUICK if args.quick else FULL
    if args.quick:
        args.models, args.seeds, args.steps = args.models[:1], 2, 2
    kept = keep_freed_memory()  # as the stages run
    rows = []
    if args.mps:
        mps_daemon(start=True)
    try:  # the processes first: this process has no CUDA context yet, so each worker is an MPS client
        for name in args.models:
            rows += [processes(name, 1, args, settings), processes(name, args.seeds, args, settings)]
    finally:
        if args.mps:
            mps_daemon(start=False)
    device = torch.device(args.device)
    configs = model_configs(str(REPO / "params.yaml"), args.models, settings.shrink)
    for name in args.models:
        rows = in_process(name, configs[name], args.seeds, settings, device) + rows
        print(f"  measured {name}", file=sys.stderr, flush=True)
    order = {name: i for i, name in enumerate(args.models)}
    rows.sort(key=lambda r: (order[r["model"]], r["contender"] != "one seed", "process" in r["contender"]))
    info = machine(device, keeps_memory=kept)
    report = {"machine": info, "machine_line": machine_line(info), "batch": settings.batch, "seq_len": settings.seq_len,
              "repeats": settings.repeats, "steps": args.steps, "rows": rows}
    write_report(markdown(report), report, args.markdown, args.json)


if __name__ == "__main__":
    main()
