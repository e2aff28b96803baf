"""One training beside a busy process that is not ours: the share of its speed alone it keeps, and
whether its checkpoint has the same bits as alone, under each OpenMP wait policy.

    python benchmarks/busy_neighbour.py --corpus PATH/tinyshakespeare.txt \\
        --markdown reports/speed/busy-neighbour-NAME.md --json reports/speed/busy-neighbour-NAME.json
    python benchmarks/busy_neighbour.py --corpus PATH --steps-scale 0.02 --rounds 1     # checks that it runs

A training of `--model` at `train.steps_scale` `--steps-scale` (the library's `train`, after joining the
core share as the train stage does, no thread setting) runs in a process of its own:

- alone;
- beside a pure-Python loop (`while True: pass`) at `nice -n 10`, one core's worth of work;
- beside a numpy loop (300x300 products, one BLAS thread) at `nice -n 10`.

Each of those under each `--policies` entry: `default` (no OMP_WAIT_POLICY: libgomp's own, which
spins a while at a barrier, then sleeps; rnnlm sets none, as these runs chose), `passive`
(OMP_WAIT_POLICY=PASSIVE: a waiting thread sleeps at once), `active` (OMP_WAIT_POLICY=ACTIVE: it
spins). A neighbour is not an rnnlm process, so the share does not count it: the training keeps
every core, and how its threads wait at each barrier for the one that shares a core decides what
it loses. Cases run in turn, round after round, so that whatever else the machine does falls on all
of them alike; a row gives the median tokens per second over the rounds (each the median over the
run's steps), the share of the same policy's speed alone, and whether every run's weights have
the bits of the first run alone. The machine should be otherwise idle.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
REPO = Path(__file__).resolve().parents[1]

from timing import corpus_parser, cpu_report, write_report  # noqa: E402

NEIGHBOURS = {
    "alone": None,
    "beside a Python loop": "while True: pass",
    "beside a numpy loop": "import numpy as np\na = np.random.rand(300, 300)\nwhile True: a @ a",
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


def _one(corpus: Path, model: str, scale: float, neighbour: str | None, policy: str | None) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
    env["TMPDIR"] = tempfile.mkdtemp(prefix="busy-neighbour-")  # a core share of its own: no other run counts
    if policy is not None:
        env["OMP_WAIT_POLICY"] = policy
    busy = None
    if neighbour is not None:
        quiet = {**env, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        busy = subprocess.Popen(["nice", "-n", "10", sys.executable, "-c", neighbour], env=quiet)
        time.sleep(1.0)  # running before the training starts
    try:
        done = subprocess.run([sys.executable, __file__, "--child", str(corpus), model, str(scale)], env=env,
                              capture_output=True, text=True, check=False)
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()
        shutil.rmtree(env["TMPDIR"], ignore_errors=True)
    if done.returncode != 0:
        raise RuntimeError(f"the training exited {done.returncode}: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(corpus: Path, model: str, scale: float, rounds: int, policies: list[str]) -> dict[str, object]:
    """Every (policy, neighbour) case trained `rounds` times, in turn round after round: a row per case
    (median tokens per second, its share of the same policy alone, every run's rate, threads, and
    whether every run's weights have the bits of the first run alone), with the model and scale."""
    runs: dict[tuple[str, str], list[dict[str, object]]] = {}
    for _ in range(rounds):
        for policy in policies:
            for neighbour, code in NEIGHBOURS.items():
                runs.setdefault((policy, neighbour), []).append(_one(corpus, model, scale, code, POLICIES[policy]))
    reference = runs[(policies[0], "alone")][0]["weights_sha256"]
    rows = []
    for (policy, neighbour), found in runs.items():
        rate = statistics.median(r["tokens_per_second"] for r in found)
        alone = statistics.median(r["tokens_per_second"] for r in runs[(policy, "alone")])
        rows.append({"policy": policy, "neighbour": neighbour, "tokens_per_second": rate, "kept": rate / alone,
                     "rates": [r["tokens_per_second"] for r in found], "threads": found[0]["threads"],
                     "same_bits": all(r["weights_sha256"] == reference for r in found)})
    return {"model": model, "steps_scale": scale, "rounds": rounds, "rows": rows}


def markdown(report: dict[str, object]) -> str:
    lines = [f"# One training beside a busy process ({report['machine_line']})", "",
             f"Written by `benchmarks/busy_neighbour.py`. {report['model']} at train.steps_scale "
             f"{report['steps_scale']}, {report['rounds']} rounds; each neighbour at `nice -n 10` on one core's "
             "worth of work. Tokens per second: the median over the rounds of each run's median step; kept: against "
             "the same policy alone; same bits: every run's weights equal the first run alone's.", "",
             "| OMP_WAIT_POLICY | case | threads | tokens/s | kept | same bits |", "|---|---|---:|---:|---:|---|"]
    for r in report["rows"]:
        lines.append(f"| {r['policy']} | {r['neighbour']} | {r['threads']} | {r['tokens_per_second']:,.0f} | "
                     f"{r['kept']:.0%} | {'yes' if r['same_bits'] else 'no'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = corpus_parser(__doc__)
    parser.add_argument("--steps-scale", type=float, default=0.25)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--policies", nargs="+", choices=list(POLICIES), default=list(POLICIES))
    args = parser.parse_args(argv)
    report = cpu_report(args.corpus, keeps_memory=False)
    report.update(measure(args.corpus.resolve(), args.model, args.steps_scale, args.rounds, args.policies))
    write_report(markdown(report), report, args.markdown, args.json)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        _child(*sys.argv[2:4], float(sys.argv[4]))
    else:
        main()
