"""Which matrix products of a training step give other bits at another thread count, under each way
of running them on this CPU, and what each way costs a training step and the stateful pass.

    python -m benchmarks.thread_bits --markdown reports/speed/thread-bits-NAME.md --json reports/speed/thread-bits-NAME.json
    python -m benchmarks.thread_bits --models astra_alpha --rounds 1 --steps 2 --tokens 20    # checks that it runs

A way (`WAYS`; `--ways` picks some) is an environment a process starts with, since MKL reads its
reproducibility mode once, at its first call: `mkl` (MKL for every product, its conditional numerical
reproducibility off, as Intel CPUs ran before strict mode was chosen), `mkl strict` (MKL_CBWR=AUTO,STRICT:
MKL's documented promise of the same bits at any thread count, which `rnnlm.compute.backend` asks for on
Intel CPUs, for every product), `onednn` (oneDNN for every product above `MIN_ONEDNN_MACS`, as AMD CPUs
with AVX-512 run them; the smaller ones stay on MKL, its mode off), `mkl strict, onednn narrow` (strict
MKL for the large products, oneDNN for one time step's: a scan's hidden side, the stateful pass and
sampling at batch 1, where strict MKL is slow), `mkl strict, onednn one row` (the same, but oneDNN only
for one time step's products of one row of at least `MIN_ONEDNN_MACS`: Intel's rule). For each model
of `--models`, one process per way:

- each large product of the step (`products`: the input and output layers forward, their input
  gradients, and the weight gradients summed over all batch x sequence rows) computed at one thread
  and at every core: same bits or not;
- the step's gradients at one thread and at every core (`probe_gradients`, the check a run makes
  before it joins the core share): same bits or not;
- our training step's median seconds at every core, over `--steps` steps after two warm-up steps;
- the stateful pass (`streamed_token_nll`, one stream at batch 1, as the evaluate stage scores the
  validation text): its losses at one thread and at every core, same bits or not, and its median
  milliseconds per token over three passes of `--tokens` tokens.

Ways run in turn, round after round, so whatever else the machine does falls on all of them alike;
a step's time is the median over the rounds, and its cost the median of its ratio to the first
way's step in the same round.
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

from benchmarks.timing import machine, machine_line, timed, write_report
from rnnlm.compute.backend import MKL_STRICT

REPO = Path(__file__).resolve().parents[1]

WAYS = {
    "mkl": {"RNNLM_GEMM": "mkl", "MKL_CBWR": ""},  # set but empty: MKL's mode off, and rnnlm keeps it
    "mkl strict": {"RNNLM_GEMM": "mkl", "MKL_CBWR": MKL_STRICT},
    "onednn": {"RNNLM_GEMM": "onednn", "MKL_CBWR": ""},
    "mkl strict, onednn narrow": {"RNNLM_GEMM": "mkl:onednn", "MKL_CBWR": MKL_STRICT},
    "mkl strict, onednn one row": {"RNNLM_GEMM": "mkl:mkl:onednn", "MKL_CBWR": MKL_STRICT},
}

def products(config, rows: int) -> list[tuple[str, int, int, int, bool]]:
    """(name, M, K, N, weight_gradient) of each large product of one training step of `config` over
    `rows` = batch x sequence rows: M x K times K x N; a weight gradient is a^T b summed over M rows."""
    from rnnlm.models.cells import CELLS

    gates = CELLS[config.cell].layer.cell_class.gates * config.hidden
    found = []
    for layer in range(config.layers):
        width = config.embd if layer == 0 else config.hidden
        found += [(f"layer {layer + 1} input product", rows, width, gates, False),
                  (f"layer {layer + 1} input gradient", rows, gates, width, False),
                  (f"layer {layer + 1} input weight gradient", gates, rows, width, True),
                  (f"layer {layer + 1} hidden weight gradient", gates, rows, config.hidden, True)]
    return found + [("output layer", rows, config.hidden, config.vocab_size, False),
                    ("output input gradient", rows, config.vocab_size, config.hidden, False),
                    ("output weight gradient", config.vocab_size, rows, config.hidden, True)]


def _product(m: int, k: int, n: int, weight_gradient: bool):
    """The product as the library computes it (`rnnlm.compute.products`), on fixed random operands."""
    from rnnlm.compute.products import linear, t_mm

    make = torch.Generator().manual_seed(m * 7 + k * 3 + n)
    if weight_gradient:  # (M, K)^T-shaped: a (K rows, M) and b (K rows, N) -> a^T b (M, N)
        a, b = torch.randn(k, m, generator=make), torch.randn(k, n, generator=make)
        return lambda: t_mm(a, b)
    x, w = torch.randn(m, k, generator=make), torch.randn(n, k, generator=make)
    return lambda: linear(x, w)


def _same(fn, cores: int) -> tuple[bool, float]:
    """Whether `fn()` (a tensor or a list of them) has the same bits at one thread and at `cores`
    (`threads.at_one_and_every`, what a run's probe compares), and the largest difference."""
    from rnnlm.compute.threads import at_one_and_every

    one, every = at_one_and_every(lambda: [out] if isinstance(out := fn(), torch.Tensor) else out, cores)
    return all(map(torch.equal, one, every)), max(float((a - b).abs().max()) for a, b in zip(one, every))


def _stateful(net, vocab_size: int, tokens: int, cores: int) -> tuple[bool, float]:
    """The stateful pass of `net` over random tokens: whether its losses have the same bits at one
    thread and at `cores` (over 200 tokens), and its median milliseconds per token over three passes
    of `tokens` tokens at every core."""
    from rnnlm.evaluation.scoring import streamed_token_nll

    stream = torch.randint(vocab_size, (tokens + 1,), generator=torch.Generator().manual_seed(2))  # (tokens + 1,)
    with torch.no_grad():
        same = _same(lambda: streamed_token_nll(net, stream[:201]), cores)[0]
        seconds = [timed(lambda: streamed_token_nll(net, stream), torch.device("cpu")) for _ in range(3)]
    return same, statistics.median(seconds) / tokens * 1e3


def _child(model: str, steps: int, stream_tokens: int) -> None:
    """One way (this process's environment), one model: prints its figures as JSON."""
    from rnnlm.compute import backend
    from rnnlm.models.kinds import build_model
    from rnnlm.params import parse_params
    from rnnlm.params_base import read_yaml
    from rnnlm.training.settings import run_settings
    from rnnlm.training.step import make_optimizer, make_training_step
    from rnnlm.training.train import probe_gradients

    params = read_yaml(REPO / "params.yaml")
    params.update(model=model)
    run = run_settings(parse_params(params), model, 65)
    cores = torch.get_num_threads()
    torch.manual_seed(0)
    net = build_model(run.config)
    batch, length = run.train.batch_size, run.train.seq_len
    listed = products(run.config, batch * length)
    rows = [(name, *_same(_product(m, k, n, grad), cores)) for name, m, k, n, grad in listed]
    probe = _same(lambda: probe_gradients(net, batch, length, run.config.vocab_size), cores)
    step = make_training_step(net, make_optimizer(net, 1e-3, 0.01, torch.device("cpu"), False), 1.0, torch.device("cpu"), False)
    tokens = torch.randint(run.config.vocab_size, (batch, length + 1), generator=torch.Generator().manual_seed(1))
    seconds = []
    for i in range(steps + 2):
        start = time.perf_counter()
        step(tokens[:, :-1], tokens[:, 1:])
        seconds.append(time.perf_counter() - start)
    stateful_same, stateful_ms = _stateful(net, run.config.vocab_size, stream_tokens, cores)
    print(json.dumps({"gemm": str(backend.gemm_for(torch.device("cpu"))), "threads": cores,
                      "products": [{"name": n, "same": s, "largest_difference": d} for n, s, d in rows],
                      "gradients_same": probe[0], "gradients_largest_difference": probe[1],
                      "step_seconds": statistics.median(seconds[2:]),
                      "stateful_same": stateful_same, "stateful_ms_per_token": stateful_ms,
                      "shapes": {name: [m, k, n] for name, m, k, n, _ in listed}}))


def _one(model: str, way: str, steps: int, tokens: int) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS",)}
    env.update(WAYS[way])
    done = subprocess.run([sys.executable, "-m", __spec__.name, "--child", model, str(steps), str(tokens)], env=env, cwd=REPO,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{model} under {way} exited {done.returncode}: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(models: list[str], rounds: int, steps: int, tokens: int, ways: list[str] | None = None) -> list[dict[str, object]]:
    """Per model and way: the products', gradients' and stateful pass's bits at two thread counts
    (each round's the same, or the row says "varies"), the median step and stateful pass over the
    rounds, and the cost of each: the median over the rounds of its time against the first way's in
    the same round (a 2-core cloud machine's rate drifts from round to round more than the ways differ).
    `ways`: those of `WAYS` to run, the first the others' reference (None: all of them)."""
    ways = ways or list(WAYS)
    found: dict[tuple[str, str], list[dict[str, object]]] = {}
    for _ in range(rounds):
        for model in models:
            for way in ways:
                found.setdefault((model, way), []).append(_one(model, way, steps, tokens))
    records = []
    for (model, way), runs in found.items():
        first = runs[0]
        step = statistics.median(r["step_seconds"] for r in runs)
        base = found[(model, ways[0])]  # the same rounds of the first way
        def cost(key: str) -> float:
            return statistics.median(r[key] / b[key] for r, b in zip(runs, base))

        records.append({"model": model, "way": way, "gemm": first["gemm"], "threads": first["threads"],
                        "products": first["products"], "shapes": first["shapes"],
                        "repeatable": all(r["products"] == first["products"] and r["gradients_same"] == first["gradients_same"]
                                          and r["stateful_same"] == first["stateful_same"] for r in runs),
                        "gradients_same": first["gradients_same"],
                        "gradients_largest_difference": first["gradients_largest_difference"],
                        "step_seconds": step, "step_seconds_each": [r["step_seconds"] for r in runs],
                        "against_first": cost("step_seconds"),
                        "stateful_same": first["stateful_same"],
                        "stateful_ms_per_token": statistics.median(r["stateful_ms_per_token"] for r in runs),
                        "stateful_against_first": cost("stateful_ms_per_token")})
    return records


def markdown(report: dict[str, object]) -> str:
    records = report["records"]
    lines = [f"# A training step's bits at one thread and at every core ({report['machine_line']})", "",
             f"Written by `benchmarks/thread_bits.py`, {report['rounds']} rounds of each way in turn, "
             f"{report['steps']} timed steps and 3 stateful passes of {report['tokens']} tokens each. Same bits: "
             f"at 1 thread and at {records[0]['threads']}; step: our training step's median seconds at every core; "
             "stateful: the stateful pass (one stream at batch 1, as the evaluate stage scores the validation "
             "text), median milliseconds per token at every core; cost: the median over the rounds of the time "
             "against the first way's in the same round.", "",
             "| model | way | GEMMs | products with other bits | gradients same bits | step s | cost "
             "| stateful same bits | stateful ms/token | cost |",
             "|---|---|---|---|---|---:|---:|---|---:|---:|"]
    for r in records:
        differ = [p["name"] for p in r["products"] if not p["same"]]
        lines.append(f"| {r['model']} | {r['way']} | {r['gemm']} | {', '.join(differ) or 'none'} | "
                     f"{'yes' if r['gradients_same'] else 'no'}{'' if r['repeatable'] else ' (varies)'} | "
                     f"{r['step_seconds']:.3f} | {r['against_first']:.2f}x | {'yes' if r['stateful_same'] else 'no'} | "
                     f"{r['stateful_ms_per_token']:.2f} | {r['stateful_against_first']:.2f}x |")
    lines += ["", "Shapes (M x K x N; a weight gradient sums over K = batch x sequence rows):", ""]
    for model in dict.fromkeys(r["model"] for r in records):
        shapes = next(r["shapes"] for r in records if r["model"] == model)
        lines.append(f"- {model}: " + "; ".join(f"{n} {'x'.join(map(str, s))}" for n, s in shapes.items()))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["astra_alpha", "astra_beta", "astra_gamma", "leviathan"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=300, help="tokens of each timed stateful pass")
    parser.add_argument("--ways", nargs="+", choices=list(WAYS), help="the ways to run, the first the reference (default: all)")
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    report: dict[str, object] = {"machine": machine(torch.device("cpu"), keeps_memory=False),
                                 "date": time.strftime("%Y-%m-%d"), "rounds": args.rounds, "steps": args.steps,
                                 "tokens": args.tokens}
    report["machine_line"] = machine_line(report["machine"])
    report["records"] = measure(args.models, args.rounds, args.steps, args.tokens, args.ways)
    write_report(markdown(report), report, args.markdown, args.json)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        _child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        main()
