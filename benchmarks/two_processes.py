"""Two runs on one machine at once: how much of its speed alone each keeps, and where the per-step
products' thread rule (`rnnlm.compute.backend.MIN_PARALLEL_NARROW_MACS`) crosses over.

    python -m benchmarks.two_processes --models astra_alpha astra_beta astra_gamma leviathan \\
        --markdown reports/speed/two-processes-NAME.md --json reports/speed/two-processes-NAME.json
    python -m benchmarks.two_processes --quick      # tiny shapes, seconds: checks it runs

Three workloads of a model at its real shapes (character vocabulary), each in a process of its own:

- `stateful`: the validation pass with the state carried, batch 1, `--tokens` tokens;
- `sampling`: the compiled generation loop, batch 1, `--tokens` / 8 new tokens;
- `training`: `--steps` training steps at the pipeline's batch (64 windows of 128).

Each is timed alone (every core), then as two processes started together, in three ways:

- `every core, no rule`: each with every core, the rule switched off (every per-step product on the
  thread pool): what two runs did before the rule;
- `every core`: each with every core and the rule: two `dvc exp run` started by hand, or sampling
  while a training runs;
- `half the cores`: each with half the cores (`OMP_NUM_THREADS`), as `python -m rnnlm_study run
  --jobs 2` starts its two queue workers.

A row gives, per process, its median seconds and the share of its speed alone it kept (alone / with
the other). A pair that has not finished after `--patience` times its time alone is stopped and
reported as such. `--crossover` times one per-step product (the compiled `NarrowProduct`, the
per-step GEMM this machine uses) on the calling thread and on the thread pool, alone, over batch
sizes and the models' hidden sizes: where the pool starts to pay is the rule's threshold.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from rnnlm.compute import backend
from rnnlm.memory import keep_freed_memory

from benchmarks.timing import machine, machine_line, model_configs, write_report

REPO = Path(__file__).resolve().parents[1]
WORKLOADS = ("stateful", "sampling", "training")
WAYS = ("every core, no rule", "every core", "half the cores")


def _child(name: str, workload: str, tokens: int, steps: int, repeats: int, start_at: float, shrink: int,
           rule: bool) -> None:
    """One process's side of a measurement: build, warm up, wait for `start_at`, time `repeats`
    rounds, print their seconds as JSON."""
    if not rule:
        backend.MIN_PARALLEL_NARROW_MACS = 0  # before the compiled code first loads and is told it
    keep_freed_memory()
    from rnnlm.inference.decoding import Decoding
    from rnnlm.inference.generation import generate, make_generator
    from rnnlm.models.language_model import RecurrentLM
    from rnnlm.training.step import EagerStep, make_optimizer

    config = model_configs("params.yaml", [name], shrink)[name]
    torch.manual_seed(0)
    model = RecurrentLM(config)
    vocab = config.vocab_size
    data = torch.randint(0, vocab, (64, 129), generator=torch.Generator().manual_seed(0))
    text = torch.randint(0, vocab, (1, tokens), generator=torch.Generator().manual_seed(1))

    def stateful() -> None:
        model.eval()
        with torch.no_grad():
            state = None
            for start in range(0, tokens, 4096):  # as rnnlm.evaluation.scoring streams the split
                _, state = model(text[:, start:start + 4096], state)

    def sampling() -> None:
        generate(model, [0], mode="stateful", decoding=Decoding("temperature", temperature=1.0),
                 max_new_tokens=max(1, tokens // 8), generator=make_generator(0))

    step = None

    def training() -> None:
        nonlocal step
        step = step or EagerStep(model, make_optimizer(model, 1e-3, 0.01, torch.device("cpu"), graph=False), 1.0)
        model.train()
        for _ in range(steps):
            step(data[:, :-1], data[:, 1:])

    fn = {"stateful": stateful, "sampling": sampling, "training": training}[workload]
    fn()  # warm: the compiled code loaded, memory mapped, packed weights cached
    while time.time() < start_at:
        time.sleep(0.001)
    seconds = []
    for _ in range(repeats):
        begin = time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - begin)
    print(json.dumps({"seconds": seconds, "threads": torch.get_num_threads()}), flush=True)


def _launch(args, name: str, workload: str, copies: int, threads: int | None, rule: bool,
            timeout: float) -> list[dict] | None:
    """`copies` child processes started together; their results, or None when they ran out of time."""
    env = dict(os.environ)
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    start_at = time.time() + args.settle
    command = [sys.executable, "-m", __spec__.name, "--child", name, workload, str(args.tokens), str(args.steps),
               str(args.repeats), repr(start_at), str(args.shrink), "1" if rule else "0"]
    children = [subprocess.Popen(command, env=env, cwd=REPO, stdout=subprocess.PIPE, text=True) for _ in range(copies)]
    deadline = start_at + timeout
    results = []
    for child in children:
        try:
            out, _ = child.communicate(timeout=max(1.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            for other in children:
                other.kill()
                other.communicate()
            return None
        if child.returncode != 0:
            raise SystemExit(f"a {workload} process of {name} failed (exit {child.returncode})")
        results.append(json.loads(out.splitlines()[-1]))
    return results


def measure_pairs(args) -> list[dict]:
    """Per model and workload: the process alone, then two at once each way of `WAYS`."""
    rows = []
    for name in args.models:
        for workload in args.workloads:
            (alone,) = _launch(args, name, workload, 1, None, True, timeout=3600)
            alone_s = statistics.median(alone["seconds"])
            row = {"model": name, "workload": workload, "alone_s": alone_s, "alone_threads": alone["threads"]}
            print(f"{name} {workload}: alone {alone_s:.3f} s ({alone['threads']} threads)", flush=True)
            for way in WAYS:
                if way == "every core, no rule" and workload == "training":
                    continue  # at batch 64 no model's per-step product is under the threshold: the same run
                row[way] = _pair(args, name, workload, way, alone_s)
            rows.append(row)
    return rows


def _pair(args, name: str, workload: str, way: str, alone_s: float) -> dict:
    """Two processes of `workload` at once, sharing the cores `way`: the median seconds of each and the
    share of `alone_s` (the median of one alone) each kept; or, past the patience, that they did not finish."""
    threads = max(1, (os.cpu_count() or 1) // 2) if way == "half the cores" else None
    limit = args.patience * alone_s * args.repeats + 30
    pair = _launch(args, name, workload, 2, threads, way != "every core, no rule", timeout=limit)
    if pair is None:
        print(f"  {way}: not finished after {limit:.1f} s", flush=True)
        return {"finished": False, "after_s": round(limit, 1)}
    medians = [statistics.median(p["seconds"]) for p in pair]
    print(f"  {way}: " + ", ".join(f"{m:.3f} s ({alone_s / m:.0%})" for m in medians), flush=True)
    return {"finished": True, "seconds": medians, "kept": [alone_s / m for m in medians], "threads": pair[0]["threads"]}


ROUND_S = 0.05
"""Seconds one round of the crossover's calls takes: long enough to time, short enough that the 80
rounds of a table take seconds (a count fixed by multiply-adds took minutes where a call costs its
overhead, 25 us, not its arithmetic)."""


def _calls_for(call, seconds: float, probe: int = 20) -> int:
    """How many calls of `call` take about `seconds`, from the time of `probe` of them (at least `probe`)."""
    call()
    begin = time.perf_counter()
    for _ in range(probe):
        call()
    return max(probe, int(seconds / max((time.perf_counter() - begin) / probe, 1e-9)))


def _us_per_call(call, calls: int, threads: int) -> float:
    """Microseconds per call of `call`, over `calls` calls on `threads` threads after one untimed call."""
    torch.set_num_threads(threads)
    call()
    begin = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - begin) / calls * 1e6


def measure_crossover(args) -> list[dict]:
    """One per-step product timed on the calling thread and on the pool, alone (medians of rounds)."""
    compiled = backend.compiled_for(backend.CPU)
    if compiled is None:
        raise SystemExit("the crossover needs the compiled loops (RNNLM_NATIVE=0 or a failed build)")
    configs = model_configs("params.yaml", args.models, args.shrink)
    shapes = sorted({(c.hidden, {"lstm": 4, "gru": 3}.get(c.cell, 1)) for c in configs.values()})
    pool = torch.get_num_threads()
    rows = []
    for hidden, gates in shapes:
        for batch in (1, 4, 16, 64):
            weight, x = torch.randn(gates * hidden, hidden), torch.randn(batch, hidden)
            product = compiled.NarrowProduct(weight, batch, 100)
            calls = _calls_for(lambda: product(x), ROUND_S)
            rounds = [(_us_per_call(lambda: product(x), calls, 1), _us_per_call(lambda: product(x), calls, pool))
                      for _ in range(5)]  # the two in turn, round after round
            torch.set_num_threads(pool)
            one, many = (statistics.median(column) for column in zip(*rounds))
            rows.append({"hidden": hidden, "gates": gates, "batch": batch, "macs": batch * hidden * gates * hidden,
                         "calling_thread_us": one, "pool_us": many, "pool_threads": pool})
            print(f"H {hidden} x {gates}, B {batch}: {batch * hidden * gates * hidden:,} MACs: calling thread "
                  f"{one:.1f} us, {pool} threads {many:.1f} us ({one / many:.2f}x)", flush=True)
    return rows


def _pair_cell(got: dict | None) -> str:
    """One way's cell of the pairs table: each process's seconds and the share of its speed alone it
    kept, or why there are none (the way is the rule itself, or the pair did not finish)."""
    if got is None:
        return "as with the rule (no product under it)"
    if not got["finished"]:
        return f"not finished after {got['after_s']} s"
    return ", ".join(f"{s:.3f} s ({k:.0%})" for s, k in zip(got["seconds"], got["kept"]))


def markdown(report: dict) -> str:
    lines = [f"# Two processes at once ({report['machine_line']})", "",
             f"Written by `benchmarks/two_processes.py` ({report['date']}). Medians of {report['repeats']} "
             f"rounds; each cell: seconds, and the share of the speed alone it kept. Workloads: the stateful "
             f"pass over {report['tokens']:,} tokens at batch 1, sampling {max(1, report['tokens'] // 8):,} "
             f"tokens at batch 1, {report['steps']} training steps at 64 x 128. Rule: per-step products under "
             f"{report['min_parallel_narrow_macs']:,} multiply-adds on the calling thread.", ""]
    if report["pairs"]:
        lines += ["| model | workload | alone | " + " | ".join(WAYS) + " |",
                  "|---|---|---|" + "---|" * len(WAYS)]
        for row in report["pairs"]:
            cells = [_pair_cell(row.get(way)) for way in WAYS]
            lines.append(f"| {row['model']} | {row['workload']} | {row['alone_s']:.3f} s | " + " | ".join(cells) + " |")
        lines.append("")
    if report["crossover"]:
        lines += ["## Where the thread pool pays for one per-step product", "",
                  "| hidden x gates | batch | multiply-adds | calling thread | thread pool | pool speed-up |",
                  "|---|---|---|---|---|---|"]
        for row in report["crossover"]:
            lines.append(f"| {row['hidden']} x {row['gates']} | {row['batch']} | {row['macs']:,} | "
                         f"{row['calling_thread_us']:.1f} us | {row['pool_us']:.1f} us ({row['pool_threads']} threads) "
                         f"| {row['calling_thread_us'] / row['pool_us']:.2f}x |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        name, workload, tokens, steps, repeats, start_at, shrink, rule = argv[1:9]
        _child(name, workload, int(tokens), int(steps), int(repeats), float(start_at), int(shrink), rule == "1")
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["astra_alpha", "astra_beta", "astra_gamma", "leviathan"])
    parser.add_argument("--workloads", nargs="+", choices=WORKLOADS, default=list(WORKLOADS))
    parser.add_argument("--tokens", type=int, default=8192, help="the stateful pass's length (sampling: an 8th)")
    parser.add_argument("--steps", type=int, default=2, help="training steps per round")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--patience", type=float, default=6.0,
                        help="stop a pair after this many times its time alone (per round)")
    parser.add_argument("--settle", type=float, default=3.0, help="seconds for the processes to start and warm up")
    parser.add_argument("--shrink", type=int, default=1, help="divide the model widths by this")
    parser.add_argument("--crossover", action="store_true", help="also time one per-step product on and off the pool")
    parser.add_argument("--no-pairs", action="store_true", help="the crossover alone")
    parser.add_argument("--quick", action="store_true", help="tiny shapes and sizes: checks that it runs")
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.quick:
        args.models, args.tokens, args.steps, args.repeats, args.shrink = ["astra_alpha"], 64, 1, 1, 16
        args.settle, args.crossover = 1.0, True
    report = {"machine": machine(backend.CPU, keeps_memory=True), "date": time.strftime("%Y-%m-%d"),
              "tokens": args.tokens, "steps": args.steps, "repeats": args.repeats,
              "min_parallel_narrow_macs": backend.MIN_PARALLEL_NARROW_MACS}
    report["machine_line"] = machine_line(report["machine"])
    report["pairs"] = [] if args.no_pairs else measure_pairs(args)
    report["crossover"] = measure_crossover(args) if args.crossover else []
    write_report(markdown(report), report, args.markdown, args.json)


if __name__ == "__main__":
    main()
