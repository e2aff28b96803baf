"""`report`: the study's table and figure, built from the folders in `reports/study/` alone.

In:  `reports/study/<model>/` (full-scale runs) and `reports/study/quick/<model>/` (quick runs), as
`collect` writes them (see `rnnlm.reporting.study_collect.FOLDER`), and the model names of
params.yaml (their order, and which have no run yet).
Out: `reports/study.md`, one row per run: tokens, parameters, steps and steps scale, where it
trained, training time, validation loss, stateful and stateless bits per character beside the
bigram floor, the context horizon, two text statistics per mode, and a link to its side-by-side
samples; then the findings (each claim of the study judged from the full-scale runs, see
`rnnlm.reporting.study_findings`); quick runs in a table of their own. `reports/study.png`: stateful and stateless bits per
character per run against the bigram floor, each run's state-reset curve and its context curve.

Nothing but the folders and params.yaml is read (no experiment, no DVC), so any clone rebuilds the
same bytes.
"""

from __future__ import annotations

import csv
import json
import math
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import yaml

from rnnlm.atomic import atomic_path, write_text_atomic
from rnnlm.errors import RnnlmError
from rnnlm.params import load_params
from rnnlm.reporting.study_collect import QUICK
from rnnlm.reporting.study_findings import findings_markdown, verdict_lines


class StudyReportError(RnnlmError):
    """The study folders cannot be reported (none found, or one is incomplete)."""


@dataclass(frozen=True)
class StudyRun:
    """One folder of reports/study/."""

    model: str
    folder: Path
    quick: bool
    train: dict
    metrics: dict
    provenance: dict

    @property
    def steps_scale(self) -> float:
        return float(self.provenance.get("steps_scale", 1.0))

    def where(self) -> str:
        """The device and the processor that trained it ("cpu: AMD EPYC", "cuda: NVIDIA H100 ...")."""
        device = self.provenance.get("device") or self.train.get("device", "?")
        processor = self.provenance.get("processor") or self.train.get("processor")
        return f"{device}: {processor}" if processor else str(device)

    @cached_property
    def entry(self) -> dict:
        """The run's own entry of `models:` in its params.yaml (cell, tokens, sizes, epochs)."""
        params = yaml.safe_load((self.folder / "params.yaml").read_text(encoding="utf-8"))
        return params["models"][self.model]

    @property
    def cell(self) -> str:
        return self.entry["cell"]

    @property
    def tokens(self) -> str:
        return self.entry["tokens"]

    @property
    def shape(self) -> tuple:
        """The recurrent stack's sizes (cell, embedding, hidden, layers), to match the two tokenizations."""
        return self.entry["cell"], self.entry["embd"], self.entry["hidden"], self.entry["layers"]

    @property
    def gap(self) -> float:
        """Stateless minus stateful bits per character: what resetting the state costs."""
        return self.metrics["stateless_bpc"] - self.metrics["stateful_bpc"]

    def epochs(self) -> list[dict[str, float]]:
        """The rows of the run's epochs.tsv (epoch, train_loss, val_loss, ...) as numbers."""
        with open(self.folder / "epochs.tsv", encoding="utf-8", newline="") as f:
            return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f, delimiter="\t")]

    def source(self) -> str:
        p = self.provenance
        if p.get("experiment"):
            return f"experiment {p['experiment']} ({str(p.get('rev', ''))[:7]})"
        if p.get("rev"):
            return f"commit {str(p['rev'])[:7]}"
        return f"{p.get('made_by', 'unknown')} at {str(p.get('commit', '?'))[:7]}"


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as error:
        raise StudyReportError(f"{path.parent}: no {path.name}; expected a folder written by `study collect`") from error


def load_runs(study_dir: Path) -> list[StudyRun]:
    """Every folder of `study_dir` (and of its quick/ subfolder) that holds a run."""
    runs = []
    for quick, root in ((False, study_dir), (True, study_dir / QUICK)):
        if not root.is_dir():
            continue
        for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".") and p.name != QUICK):
            if not (folder / "params.yaml").is_file():  # the findings read the run's own model entry
                raise StudyReportError(f"{folder}: no params.yaml; expected a folder written by `study collect`")
            runs.append(StudyRun(folder.name, folder, quick, _read_json(folder / "train_metrics.json"),
                                 _read_json(folder / "metrics.json"), _read_json(folder / "provenance.json")))
    return runs


def _fmt(value, spec: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return format(value, spec)


def _text(run: StudyRun, mode: str, key: str):
    return run.metrics.get("text", {}).get(mode, {}).get(key)


def _row(run: StudyRun, base: Path) -> str:
    """The run's table row; its name links to its samples, relative to `base` (the Markdown's folder)."""
    t, m = run.train, run.metrics
    samples = Path(os.path.relpath(run.folder / "generations.md", base)).as_posix()
    return (
        f"| [{run.model}]({samples}) "
        f"| {m.get('tokens', '—')} | {_fmt(t.get('parameters'), ',.0f')} "
        f"| {_fmt(t.get('steps'), ',.0f')} ({_fmt(run.steps_scale, 'g')}) | {run.where()} "
        f"| {_fmt(t.get('seconds'), ',.0f')} | {_fmt(t.get('val_loss'), '.3f')} / {_fmt(t.get('best_val_loss'), '.3f')} "
        f"| **{_fmt(m.get('stateful_bpc'), '.3f')}** | {_fmt(m.get('stateless_bpc'), '.3f')} "
        f"| {_fmt(m.get('bigram_bpc'), '.3f')} | {_fmt(m.get('context_horizon'), '.0f')} "
        f"| {_fmt(_text(run, 'stateless', 'known_word_share'), '.2f')} / {_fmt(_text(run, 'stateful', 'known_word_share'), '.2f')} "
        f"| {_fmt(_text(run, 'stateless', 'repeated_4gram_share'), '.2f')} / "
        f"{_fmt(_text(run, 'stateful', 'repeated_4gram_share'), '.2f')} | {run.source()} |"
    )


HEADER = [
    "| model (samples) | tokens | params | steps (scale) | trained on | train s | val loss (last / best) "
    "| stateful | stateless | bigram | context horizon | known words | repeated 4-grams | from |",
    "|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
]


def full_scale_table(runs: list[StudyRun], models: list[str], base: Path) -> list[str]:
    """The full-scale runs in the order of `models` (then any other), each model without one listed
    as not run yet; links relative to `base`."""
    full = {r.model: r for r in runs if not r.quick}
    ordered = [m for m in models if m in full] + sorted(m for m in full if m not in models)
    return [*HEADER, *(_row(full[m], base) for m in ordered),
            *(f"| {m} | {' | '.join(['—'] * 12)} | not run yet |" for m in models if m not in full)]


README_BEGIN = "<!-- the study's full-scale table: written by `python -m rnnlm.study report`, do not edit -->"
README_END = "<!-- end of the study's table -->"


def update_readme(readme: Path, runs: list[StudyRun], models: list[str], markdown: Path) -> None:
    """Replace what lies between the README's two markers with the current full-scale table and one
    verdict line per claim, linking to the findings in `markdown`."""
    text = readme.read_text(encoding="utf-8")
    if README_BEGIN not in text or README_END not in text:
        raise StudyReportError(f"{readme}: no study table markers; expected the lines {README_BEGIN} and {README_END}")
    head, rest = text.split(README_BEGIN, 1)
    _, tail = rest.split(README_END, 1)
    link = Path(os.path.relpath(markdown, readme.parent)).as_posix()
    block = [*full_scale_table(runs, models, readme.parent), "", "The study's claims, as the numbers judge them:", "",
             *verdict_lines([r for r in runs if not r.quick], link)]
    write_text_atomic(readme, f"{head}{README_BEGIN}\n" + "\n".join(block) + f"\n{README_END}{tail}")


def to_markdown(runs: list[StudyRun], models: list[str], study_dir: Path, markdown: Path, figure_name: str) -> str:
    """The study as Markdown (to be written at `markdown`): full-scale runs in the order of
    `models`, models without one listed as not run yet, then the quick runs."""
    base = markdown.parent
    lines = [
        "# The study: every model, both inference modes",
        "",
        "Bits per character on the validation split. Stateless: the state is reset before every token;",
        "stateful: carried through the whole split. Bigram: a count-based character bigram, the best a",
        "model that sees one token can hope for. Context horizon: the fewest tokens of context c from",
        "which fixed validation targets are predicted within the evaluate stage's tolerance of the",
        "carried state (runs evaluated before the context curve existed show a dash). Known words and",
        "repeated word 4-grams: text statistics of the sampled text, stateless / stateful. Validation",
        "loss in nats per token (per piece for Scribe). Each model's name links to its samples, both",
        "modes side by side.",
        "",
        f"Built by `python -m rnnlm.study report` from the folders in `{Path(os.path.relpath(study_dir, base)).as_posix()}/`"
        " beside this file, which",
        "`python -m rnnlm.study collect` fills from finished runs (each folder's provenance.json says which).",
        "",
        "## Full scale",
        "",
        *full_scale_table(runs, models, base),
        "",
        *findings_markdown([r for r in runs if not r.quick]),
    ]
    quick = [r for r in runs if r.quick]
    if quick:
        lines += ["## Quick runs (a fraction of the steps: not the study's numbers)", "", *HEADER]
        lines += [_row(r, base) for r in sorted(quick, key=lambda r: (models.index(r.model) if r.model in models
                                                                          else len(models), r.model))]
    lines += ["", f"![the study]({figure_name})", ""]
    return "\n".join(lines)


def _reset_curve(run: StudyRun) -> tuple[list[str], list[float]]:
    curve = run.metrics.get("reset_curve_bpc", {})
    ks = sorted((k for k in curve if k != "never"), key=int) + (["never"] if "never" in curve else [])
    return ks, [curve[k] for k in ks]


def write_figure(runs: list[StudyRun], models: list[str], path: Path) -> None:
    """Left: stateful and stateless bpc per full-scale run, the bigram floor marked. Middle: reset
    curves. Right: context curves, as the excess over the carried state (runs that have one)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    full = sorted((r for r in runs if not r.quick),
                  key=lambda r: (models.index(r.model) if r.model in models else len(models), r.model))
    fig, (bars, curves, contexts) = plt.subplots(1, 3, figsize=(20, 5.5), gridspec_kw={"width_ratios": [1.3, 1, 1]})
    x = range(len(full))
    bars.bar([i - 0.2 for i in x], [r.metrics.get("stateful_bpc") for r in full], width=0.4, label="stateful")
    bars.bar([i + 0.2 for i in x], [r.metrics.get("stateless_bpc") for r in full], width=0.4, label="stateless")
    bars.scatter(list(x), [r.metrics.get("bigram_bpc") for r in full], marker="_", s=900, color="black", zorder=3,
                 label="bigram floor")
    bars.set_xticks(list(x), [r.model for r in full], fontsize=7, rotation=30)
    bars.set_ylabel("bits per character (validation)")
    bars.legend()
    for run in full:
        ks, values = _reset_curve(run)
        finite = [int(k) for k in ks if k != "never"]
        points = [*finite, 2 * max(finite, default=1)][: len(ks)]  # "never" drawn one doubling past the largest k
        curves.plot(points, values, marker="o", ms=3, label=run.model)
    curves.set_xscale("log", base=2)
    curves.set_xlabel("state reset every k tokens (the last point: never)")
    curves.set_ylabel("bits per character")
    curves.legend(fontsize=6)
    for run in full:
        context, carried = run.metrics.get("context_curve_bpc"), run.metrics.get("context_carried_bpc")
        if context and carried:
            lengths = sorted(context, key=int)
            contexts.plot([int(c) for c in lengths], [100 * (context[c] / carried - 1) for c in lengths], marker="o",
                          ms=3, label=run.model)
    contexts.set_xscale("log", base=2)
    contexts.set_xlabel("tokens of context c (fixed targets, zero state before them)")
    contexts.set_ylabel("% above the carried state")
    if contexts.lines:
        contexts.legend(fontsize=6)
    fig.suptitle("Stateless vs stateful: each model against the bigram floor, its state-reset curve and its "
                 "context curve")
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, metadata={"Software": None})
    plt.close(fig)


def report(study_dir: Path, markdown: Path, figure: Path, params_path: str = "params.yaml",
           readme: Path | None = None) -> list[StudyRun]:
    """Write `markdown` and `figure` (and the table in `readme`, if given) from the folders of
    `study_dir`; returns the runs found."""
    models = list(load_params(params_path).models)
    runs = load_runs(study_dir)
    if not runs:
        raise StudyReportError(f"{study_dir}: no study folders; run `python -m rnnlm.study collect` first")
    write_text_atomic(markdown, to_markdown(runs, models, study_dir, markdown, figure.name))
    write_figure(runs, models, figure)
    if readme is not None:
        update_readme(readme, runs, models, markdown)
    return runs
