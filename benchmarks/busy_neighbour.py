"""One training beside busy processes: the share of its speed alone it keeps, and whether its
checkpoint has the same bits as alone, under each OpenMP wait policy.

    python -m benchmarks.busy_neighbour --corpus PATH/tinyshakespeare.txt --policies default \
        --markdown reports/speed/busy-neighbour-NAME.md --json reports/speed/busy-neighbour-NAME.json
    python -m benchmarks.busy_neighbour --corpus PATH --steps-scale 0.02 --rounds 1     # checks that it runs

A training of `--model` at `train.steps_scale` `--steps-scale` (the library's `train`, after joining the
core share as the train stage does, no thread setting) runs in a process of its own, with a TMPDIR of
its own, in each case of `NEIGHBOURS` (`--cases` picks some):

- alone;
- beside a pure-Python loop (`while True: pass`), a numpy loop (300x300 products, one BLAS thread) or
  a two-thread PyTorch loop (512x512 products), each at `nice -n 10`: processes that are not rnnlm's,
  which the share's folder cannot count and its count of busy threads leaves out (they run at a lower
  priority), so the training keeps every core and how its threads wait at each barrier for the one
  that shares a core decides what it loses;
- beside the two-thread PyTorch loop at the training's own priority: counted among the busy threads
  (`rnnlm.compute.threads.busy_elsewhere`), so the training gives up a core;
- beside another rnnlm training (astra_alpha at full scale) with a TMPDIR of its own, at the same
  priority, or one or two of them at `nice -n 10`: a Slurm job, another user or another shell, which
  the machine's share counts whatever their TMPDIR.

Each case under each `--policies` entry: `default` (no OMP_WAIT_POLICY: libgomp's own, which
spins a while at a barrier, then sleeps; rnnlm sets none, as these runs chose), `passive`
(OMP_WAIT_POLICY=PASSIVE: a waiting thread sleeps at once), `active` (OMP_WAIT_POLICY=ACTIVE: it
spins). Cases run in turn, round after round, so that whatever else the machine does falls on all
of them alike; a row gives the median tokens per second over the rounds (each the median over the
run's steps), the share of the same policy's speed alone, the threads each run ended on, and
whether every run's weights have the bits of the first run alone. The machine should be otherwise
idle (a paused training, SIGSTOP, counts as idle: it holds no core of the share).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.timing import corpus_parser, cpu_report, write_report

REPO = Path(__file__).resolve().parents[1]

RNNLM = "rnnlm"
"""A neighbour that is another rnnlm training (this file's `--child`, astra_alpha at full scale, so it
outlasts the one measured), in a TMPDIR of its own: it joins the machine's core share as any run does."""

PYTHON_LOOP = "while True: pass"
NUMPY_LOOP = "import numpy as np\na = np.random.rand(300, 300)\nwhile True: a @ a"
TORCH_LOOP = "import torch\ntorch.set_num_threads(2)\na = torch.randn(512, 512)\nwhile True: a @ a"

NEIGHBOURS = {  # case -> its neighbours, each (nice, what it runs)
    "alone": [],
    "beside a Python loop": [(10, PYTHON_LOOP)],
    "beside a numpy loop": [(10, NUMPY_LOOP)],
    "beside a two-thread PyTorch loop": [(10, TORCH_LOOP)],
    "beside a two-thread PyTorch loop at the same priority": [(0, TORCH_LOOP)],
    "beside an rnnlm training, another TMPDIR": [(0, RNNLM)],
    "beside an rnnlm training at nice 10, another TMPDIR": [(10, RNNLM)],
    "beside two rnnlm trainings at nice 10, other TMPDIRs": [(10, RNNLM), (10, RNNLM)],
}
POLICIES = {"default": None, "passive": "PASSIVE", "active": "ACTIVE"}


def _child(corpus: str, model: str, scale: float) -> None:
    """One training, as the train stage runs it (joined to the core share); prints its figures as JSON."""
    from rnnlm.compute import threads
    from rnnlm.data.corpus import character_vocabulary, split_corpus
    from rnnlm.data.tokenizers import CharTokenizer
    from rnnlm.params import parse_params
    from rnnlm.params_base import read_yaml
    from rnnlm.training.record import RunRecord
    from rnnlm.training.settings import run_settings
    from rnnlm.training.train import train

    threads.join()
    params = read_yaml(REPO / "params.yaml")
    params.update(model=model)
    params["train"].update(steps_scale=scale, device="cpu")
    text = Path(corpus).read_text(encoding="utf-8")
    split = split_corpus(text, params["data"]["train_fraction"])
    tokenizer = CharTokenizer(character_vocabulary(text))
    result = train(run_settings(parse_params(params), model, tokenizer.vocab_size), tokenizer, split.train, split.val,
                   RunRecord(bar=False))
    digest = hashlib.sha256()
    for name, tensor in sorted(result.checkpoint.model_state.items()):
        digest.update(name.encode() + tensor.numpy().tobytes())
    rates = [row["tokens_per_second"] for row in result.history.steps]
    print(json.dumps({"tokens_per_second": statistics.median(rates), "seconds": result.seconds,
                      "weights_sha256": digest.hexdigest(), "threads": __import__("torch").get_num_threads()}))


def _one(corpus: Path, model: str, scale: float, neighbours: list[tuple[int, str]],
         policy: str | None) -> dict[str, object]:
    """One training of `model` beside `neighbours` (each started a second before it, killed after it),
    each process in a TMPDIR of its own; the core share is the machine's, as for any run."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "RNNLM_CORES_DIR")}
    tmpdirs = [tempfile.mkdtemp(prefix="busy-neighbour-") for _ in range(len(neighbours) + 1)]
    if policy is not None:
        env["OMP_WAIT_POLICY"] = policy
    busy = []
    for (nice, code), tmpdir in zip(neighbours, tmpdirs[1:]):
        if code == RNNLM:
            command, own = [sys.executable, "-m", __spec__.name, "--child", str(corpus), "astra_alpha", "1.0"], {**env}
        else:  # one core's worth of work, unless the code sets its threads itself
            command, own = [sys.executable, "-c", code], {**env, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
                                                          "MKL_NUM_THREADS": "1"}
        busy.append(subprocess.Popen(["nice", "-n", str(nice), *command], env={**own, "TMPDIR": tmpdir}, cwd=REPO,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    if busy:
        time.sleep(1.0)  # running before the training starts
    try:
        done = subprocess.run([sys.executable, "-m", __spec__.name, "--child", str(corpus), model, str(scale)],
                              env={**env, "TMPDIR": tmpdirs[0]}, cwd=REPO, capture_output=True, text=True, check=False)
    finally:
        for process in busy:
            process.kill()
            process.wait()
        for tmpdir in tmpdirs:
            shutil.rmtree(tmpdir, ignore_errors=True)
    if done.returncode != 0:
        raise RuntimeError(f"the training exited {done.returncode}: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(corpus: Path, model: str, scale: float, rounds: int, policies: list[str],
            cases: dict[str, list[tuple[int, str]]] = NEIGHBOURS) -> dict[str, object]:
    """Every (policy, case) trained `rounds` times, in turn round after round: a row per case
    (median tokens per second, its share of the same policy alone, every run's rate, threads, and
    whether every run's weights have the bits of the first run alone), with the model and scale."""
    runs: dict[tuple[str, str], list[dict[str, object]]] = {}
    for _ in range(rounds):
        for policy in policies:
            for neighbour, neighbours in cases.items():
                runs.setdefault((policy, neighbour), []).append(_one(corpus, model, scale, neighbours,
                                                                     POLICIES[policy]))
    reference = runs[(policies[0], "alone")][0]["weights_sha256"]
    rows = []
    for (policy, neighbour), found in runs.items():
        rate = statistics.median(r["tokens_per_second"] for r in found)
        alone = statistics.median(r["tokens_per_second"] for r in runs[(policy, "alone")])
        rows.append({"policy": policy, "neighbour": neighbour, "tokens_per_second": rate, "kept": rate / alone,
                     "rates": [r["tokens_per_second"] for r in found], "threads": [r["threads"] for r in found],
                     "same_bits": all(r["weights_sha256"] == reference for r in found)})
    return {"model": model, "steps_scale": scale, "rounds": rounds, "rows": rows}


def markdown(report: dict[str, object]) -> str:
    lines = [f"# One training beside a busy process ({report['machine_line']})", "",
             f"Written by `benchmarks/busy_neighbour.py`. {report['model']} at train.steps_scale "
             f"{report['steps_scale']}, {report['rounds']} rounds, each process in a TMPDIR of its own. "
             "Tokens per second: the median over the rounds of each run's median step; kept: against the same policy "
             "alone; threads: what each round's run ended on (its share of the cores); same bits: every run's weights "
             "equal the first run alone's.", "",
             "| OMP_WAIT_POLICY | case | threads | tokens/s | kept | every round's tokens/s | same bits |",
             "|---|---|---|---:|---:|---|---|"]
    for r in report["rows"]:
        lines.append(f"| {r['policy']} | {r['neighbour']} | {', '.join(map(str, r['threads']))} | "
                     f"{r['tokens_per_second']:,.0f} | {r['kept']:.0%} | {', '.join(f'{x:,.0f}' for x in r['rates'])} | "
                     f"{'yes' if r['same_bits'] else 'no'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = corpus_parser(__doc__)
    parser.add_argument("--steps-scale", type=float, default=0.25)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--policies", nargs="+", choices=list(POLICIES), default=list(POLICIES))
    parser.add_argument("--cases", nargs="+", choices=list(NEIGHBOURS), default=list(NEIGHBOURS),
                        help="which cases (alone is always measured: the others are read against it)")
    args = parser.parse_args(argv)
    cases = {name: NEIGHBOURS[name] for name in NEIGHBOURS if name == "alone" or name in args.cases}
    report = cpu_report(args.corpus, keeps_memory=False)
    report.update(measure(args.corpus.resolve(), args.model, args.steps_scale, args.rounds, args.policies, cases))
    write_report(markdown(report), report, args.markdown, args.json)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        _child(*sys.argv[2:4], float(sys.argv[4]))
    else:
        main()
