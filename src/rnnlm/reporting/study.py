"""The whole study as one queue of DVC experiments, and one table and figure built from them.

    python -m rnnlm.study run [--models NAME ...] [--steps-scale S] [--wait]
    python -m rnnlm.study report [--markdown reports/study.md] [--figure reports/study.png]

`run` queues one experiment per model (`dvc exp run --queue -S model=NAME -S train.steps_scale=S`)
and starts the queue with one worker (`dvc queue start`), unless a worker is already running: the
models train one after another, each with every core. `--wait` follows the queue until it is empty.

`report` reads every experiment and commit of the repository's history through `dvc.api.exp_show`,
keeps for each (model, steps scale) the newest successful run, and writes a Markdown table and a
PNG figure: stateful and stateless bits per character per model against the bigram floor, and each
model's state-reset curve. Models of params.yaml that have no run yet are listed as missing.
"""

from __future__ import annotations

import math
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from rnnlm.atomic import atomic_path, write_text_atomic
from rnnlm.errors import RnnlmError
from rnnlm.params import load_params

MISSING = "missing"


class StudyError(RnnlmError):
    """The study cannot be queued or reported (DVC refused, no experiments to read)."""


# ---------------------------------------------------------------------------------------------
# run


def queue_commands(models: Sequence[str], steps_scale: float) -> list[list[str]]:
    """The `dvc exp run --queue` command of each model."""
    return [
        ["dvc", "exp", "run", "--queue", "-S", f"model={name}", "-S", f"train.steps_scale={steps_scale:g}"]
        for name in models
    ]


def _dvc(command: list[str]) -> str:
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        last = (result.stderr.strip() or result.stdout.strip() or "no output").splitlines()[-1]
        raise StudyError(f"{' '.join(command)} failed: {last}")
    return result.stdout


def _workers_running() -> bool:
    """True when `dvc queue status` reports an active or idle worker (a second one would train in
    parallel on the same cores)."""
    for line in _dvc(["dvc", "queue", "status"]).splitlines():
        if line.startswith("Worker status:"):
            counts = [int(word) for word in line.replace(",", " ").split() if word.isdigit()]
            return sum(counts) > 0
    return False


def _queue_busy() -> bool:
    """True while `dvc queue status` lists a queued or running experiment."""
    status = _dvc(["dvc", "queue", "status"])
    return any(word in line for line in status.splitlines()[1:] for word in ("Queued", "Running"))


def run(models: Sequence[str], steps_scale: float, wait: bool, params_path: str = "params.yaml") -> None:
    known = load_params(params_path).models
    unknown = [m for m in models if m not in known]
    if unknown:
        raise StudyError(f"--models {' '.join(unknown)}: not under models: in {params_path}; expected some of {', '.join(known)}")
    for command in queue_commands(models, steps_scale):
        _dvc(command)
        print("queued:", " ".join(command[3:]))
    if _workers_running():
        print("a queue worker is already running; it will take these experiments in turn")
    else:
        # Not through a pipe: the worker DVC leaves running would hold it open, and we would wait on it.
        started = subprocess.run(["dvc", "queue", "start", "--jobs", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if started.returncode != 0:
            raise StudyError("dvc queue start failed; run it by hand to see why")
        print("queue started (one worker).")
    print("Follow it with `dvc queue status` / `dvc queue logs NAME`;")
    print("when it is empty: python -m rnnlm.study report")
    while wait and _queue_busy():
        time.sleep(30)


# ---------------------------------------------------------------------------------------------
# report: records -> one row per (model, steps scale)


def load_records(repo: str | None = None) -> pd.DataFrame:
    """Every commit of the history and every experiment derived from one, as DVC reports them."""
    import dvc.api

    commits = int(_dvc(["git", "rev-list", "--count", "HEAD"]).strip()) if repo is None else 10_000
    return pd.DataFrame(dvc.api.exp_show(repo=repo, num=commits))


def _column(frame: pd.DataFrame, *names: str) -> pd.Series:
    """The first of `names` that is a column (DVC prefixes a metric with its file when two files
    share a name), or a column of NaN."""
    for name in names:
        if name in frame:
            return frame[name]
    return pd.Series(math.nan, index=frame.index)


def context_lengths(records: pd.DataFrame) -> list[int]:
    """The context lengths c that any record's context curve has, ascending."""
    prefix = "context_curve_bpc."
    return sorted({int(name[len(prefix):]) for name in records.columns if str(name).startswith(prefix)})


def reset_points(records: pd.DataFrame) -> list[str]:
    """The state-reset intervals k that any record's reset curve has (`evaluate.reset_every` of the
    runs), as metrics.json names them: ascending, then "never"."""
    prefix = "reset_curve_bpc."
    found = {str(name)[len(prefix):] for name in records.columns if str(name).startswith(prefix)}
    return sorted(found - {"never"}, key=int) + (["never"] if "never" in found else [])


def study_rows(records: pd.DataFrame, models: Sequence[str]) -> pd.DataFrame:
    """One row per (model, steps scale) with its newest finished run, plus a 'missing' row for each
    of `models` that has no run at all. Columns are the table's, in order."""
    frame = pd.DataFrame(
        {
            "model": _column(records, "model", "params.yaml:model"),
            "steps_scale": _column(records, "train.steps_scale", "params.yaml:train.steps_scale"),
            "tokens": _column(records, "reports/metrics.json:tokens", "tokens"),
            "parameters": _column(records, "parameters", "reports/train/metrics.json:parameters"),
            "steps": _column(records, "steps", "reports/train/metrics.json:steps"),
            "device": _column(records, "device", "reports/train/metrics.json:device"),
            "train_seconds": _column(records, "seconds", "reports/train/metrics.json:seconds"),
            "val_loss": _column(records, "val_loss", "reports/train/metrics.json:val_loss"),
            "stateful_bpc": _column(records, "stateful_bpc"),
            "stateless_bpc": _column(records, "stateless_bpc"),
            "bigram_bpc": _column(records, "bigram_bpc"),
            "context_horizon": _column(records, "context_horizon"),
            "known_words_stateless": _column(records, "text.stateless.known_word_share"),
            "known_words_stateful": _column(records, "text.stateful.known_word_share"),
            "repeats_stateless": _column(records, "text.stateless.repeated_4gram_share"),
            "repeats_stateful": _column(records, "text.stateful.repeated_4gram_share"),
            "source": _source(records),
            "recency": _recency(records),
        }
    )
    for k in reset_points(records):
        frame[f"reset_{k}"] = pd.to_numeric(_column(records, f"reset_curve_bpc.{k}"), errors="coerce")
    # The context curve as each run's excess over its carried state, for whatever lengths were measured.
    carried = pd.to_numeric(_column(records, "context_carried_bpc"), errors="coerce")
    for c in context_lengths(records):
        frame[f"context_{c}"] = pd.to_numeric(_column(records, f"context_curve_bpc.{c}"), errors="coerce") / carried - 1
    state = _column(records, "State")
    finished = state.isna() | (state == "Success")
    is_run = frame["stateful_bpc"].notna() & frame["model"].notna() & (_column(records, "rev") != "workspace")
    frame = frame[finished & is_run]
    frame = frame.sort_values("recency", kind="stable").drop_duplicates(["model", "steps_scale"], keep="first")
    frame = frame.drop(columns="recency")
    missing = [m for m in models if m not in set(frame["model"])]
    rows = pd.concat([frame, pd.DataFrame({"model": missing, "source": MISSING})], ignore_index=True)
    order = {m: i for i, m in enumerate(models)}
    rows["_order"] = rows["model"].map(lambda m: order.get(m, len(order)))
    return rows.sort_values(["_order", "steps_scale"]).drop(columns="_order").reset_index(drop=True)


def _recency(records: pd.DataFrame) -> pd.Series:
    """A sort key, smaller = newer. `exp_show` lists commits newest first, each followed by the
    experiments derived from it, newest first; an experiment is newer than the commit it came from."""
    baseline = (_column(records, "typ") == "baseline").cumsum()
    is_commit = _column(records, "Experiment").isna() & (_column(records, "typ") == "baseline")
    return baseline * 2 + is_commit.astype(int) + pd.Series(range(len(records)), index=records.index) / (10 * len(records) + 1)


def _source(records: pd.DataFrame) -> pd.Series:
    """'experiment name (rev)' for an experiment, 'commit rev' for a commit."""
    name, rev = _column(records, "Experiment"), _column(records, "rev").astype(str).str[:7]
    return pd.Series(
        [f"{n} ({r})" if isinstance(n, str) and n else f"commit {r}" for n, r in zip(name, rev)], index=records.index
    )


# ---------------------------------------------------------------------------------------------
# report: rows -> Markdown and PNG


def _fmt(value, spec: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return format(value, spec)


def to_markdown(rows: pd.DataFrame) -> str:
    lines = [
        "# The study: every model, both inference modes",
        "",
        "Bits per character on the validation split. Stateless: the state is reset before every token;",
        "stateful: carried through the whole split. Bigram: a count-based character bigram, the best a",
        "model that sees one token can hope for. Context horizon: the fewest tokens of context c from",
        "which fixed validation targets are predicted within the evaluate stage's tolerance of the",
        "carried state (runs evaluated before the context curve existed show a dash). Known words and",
        "repeated word 4-grams: text statistics of the sampled text, stateless / stateful.",
        "Built by `python -m rnnlm.study report` from the commits and experiments `dvc exp show` lists;",
        "the runs kept in reports/study/<model>/ are not read by it.",
        "",
        "| model | tokens | params | steps (scale) | device | train s | val loss | stateful | stateless | bigram | "
        "context horizon | known words | repeated 4-grams | from |",
        "|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows.itertuples():
        if r.source == MISSING:
            lines.append(f"| {r.model} | {' | '.join(['—'] * 12)} | not run yet |")
            continue
        lines.append(
            f"| {r.model} | {r.tokens} | {_fmt(r.parameters, ',.0f')} | {_fmt(r.steps, ',.0f')} "
            f"({_fmt(r.steps_scale, 'g')}) | {r.device} | {_fmt(r.train_seconds, ',.0f')} | {_fmt(r.val_loss, '.3f')} | "
            f"**{_fmt(r.stateful_bpc, '.3f')}** | {_fmt(r.stateless_bpc, '.3f')} | {_fmt(r.bigram_bpc, '.3f')} | "
            f"{_fmt(r.context_horizon, '.0f')} | {_fmt(r.known_words_stateless, '.2f')} / "
            f"{_fmt(r.known_words_stateful, '.2f')} | {_fmt(r.repeats_stateless, '.2f')} / "
            f"{_fmt(r.repeats_stateful, '.2f')} | {r.source} |"
        )
    return "\n".join(lines) + "\n"


def write_figure(rows: pd.DataFrame, path: Path) -> None:
    """Left: stateful and stateless bpc per run, the bigram floor marked. Middle: reset curves.
    Right: context curves, as the excess over the carried state (runs that have one)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = rows[rows["source"] != MISSING]
    labels = [f"{m}\n×{s:g}" for m, s in zip(runs["model"], runs["steps_scale"])]
    fig, (bars, curves, contexts) = plt.subplots(1, 3, figsize=(20, 5.5), gridspec_kw={"width_ratios": [1.3, 1, 1]})
    x = range(len(runs))
    bars.bar([i - 0.2 for i in x], runs["stateful_bpc"], width=0.4, label="stateful")
    bars.bar([i + 0.2 for i in x], runs["stateless_bpc"], width=0.4, label="stateless")
    bars.scatter(list(x), runs["bigram_bpc"], marker="_", s=900, color="black", zorder=3, label="bigram floor")
    bars.set_xticks(list(x), labels, fontsize=7)
    bars.set_ylabel("bits per character (validation)")
    bars.legend()
    ks = [name[len("reset_"):] for name in runs.columns if name.startswith("reset_")]  # as measured, "never" last
    finite = [int(k) for k in ks if k != "never"]
    points = [*finite, 2 * max(finite, default=1)][: len(ks)]  # "never" drawn one doubling past the largest k
    for label, (_, r) in zip(labels, runs.iterrows()):
        curves.plot(points, [r[f"reset_{k}"] for k in ks], marker="o", ms=3, label=label.replace("\n", " "))
    curves.set_xscale("log", base=2)
    curves.set_xticks(points, ks, fontsize=7)
    curves.set_xlabel("state reset every k tokens")
    curves.set_ylabel("bits per character")
    curves.legend(fontsize=6)
    lengths = sorted(int(name.split("_")[1]) for name in runs.columns if name.startswith("context_")
                     and name.split("_")[1].isdigit())
    for label, (_, r) in zip(labels, runs.iterrows()):
        values = [100 * r[f"context_{c}"] for c in lengths]
        if lengths and not all(math.isnan(v) for v in values):
            contexts.plot(lengths, values, marker="o", ms=3, label=label.replace("\n", " "))
    contexts.set_xscale("log", base=2)
    contexts.set_xlabel("tokens of context c (fixed targets, zero state before them)")
    contexts.set_ylabel("% above the carried state")
    if contexts.lines:
        contexts.legend(fontsize=6)
    fig.suptitle("Stateless vs stateful: each model against the bigram floor, its state-reset curve and its "
                 "context curve")
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)


def report(markdown: Path, figure: Path, params_path: str = "params.yaml") -> pd.DataFrame:
    models = list(load_params(params_path).models)
    records = load_records()
    if records.empty:
        raise StudyError("no commits or experiments with metrics found; run `python -m rnnlm.study run` first")
    rows = study_rows(records, models)
    write_text_atomic(markdown, to_markdown(rows) + f"\n![the study]({figure.name})\n")
    write_figure(rows, figure)
    return rows
