"""`report`: the study's tables, figure and summaries, built from the folders in `reports/study/`.

In:  the run folders (`rnnlm_study.folders.load_runs`: every seed of every model, and
     the quick runs) and the model names of params.yaml (their order, and which have no run yet).
Out, all written to temporary files first and renamed together at the end (a failure leaves the
previous outputs as they were; a kill between two renames is mended by running it again):
  reports/study.md          per model, every figure as mean ± the half-width of its 95% interval
                            over seeds, with n; every run; the findings (`study_findings`); the
                            quick runs apart
  reports/study.png         stateful and stateless bits per character with their intervals against
                            the bigram floor; the state-reset and context curves, mean and band
  reports/study/runs.csv    one row per run (`rnnlm_study.judging.table.runs_frame`)
  reports/study/summary.csv per model and figure: n, mean, sd, the 95% interval
  reports/study/summary.json per model: n and the means, a metrics file dvc.yaml declares
  reports/study/findings.json per claim its verdict, per comparison its estimate, interval, n,
                            one-sided p, verdict and seeds to decide (`findings_record`), the other
                            metrics file

Nothing but the folders, params.yaml and git is read (no experiment, no DVC): git says which rules
are registered and which runs were trained after them (`rnnlm_study.registration_git`), so any clone
with the history rebuilds the same bytes; outside a git repository the report refuses.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Collection
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from rnnlm.atomic import AtomicFiles
from rnnlm.errors import RnnlmError
from rnnlm.params import load_params
from rnnlm.reporting.markdown import table_head
from rnnlm_study.judging.evidence import Evidence, TextSampling
from rnnlm_study.judging.figure import write_figure
from rnnlm_study.judging.findings import Pass, check_claims, confirmatory, exploratory, findings_record, later
from rnnlm_study.judging.findings_markdown import findings_markdown, glance_table
from rnnlm_study.folders import in_study_order, load_runs
from rnnlm_study.piece_counts import other_tokenizer_runs
from rnnlm_study.study_run import StudyRun
from rnnlm_study.registration import Registration, RegistrationError
from rnnlm_study.registration_git import repository_of, sealed_registrations, trained_after
from rnnlm_study.judging.table import FIGURES, csv_text, epochs_frame, run_figures, runs_frame, summary_frame, summary_json


class StudyReportError(RnnlmError):
    """The study folders cannot be reported (none found)."""


def _fmt(value, spec: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return format(value, spec)


class Summary:
    """Per-model lookups into the summary frame: '2.399 ± 0.004', or the value alone when n = 1."""

    def __init__(self, summary: pd.DataFrame):
        self.rows = {(r.model, r.figure): r for r in summary.itertuples(index=False)}

    def mean(self, model: str, figure: str) -> float | None:
        row = self.rows.get((model, figure))
        return None if row is None else row.mean

    def text(self, model: str, figure: str) -> str:
        """The mean ± the half-width of its 95% interval (the value alone for one run), written as the
        figure's registry entry (`rnnlm_study.judging.table.FIGURES`) says."""
        row = self.rows.get((model, figure))
        if row is None:
            return "—"
        spec = FIGURES[figure].spec
        return format(row.mean, spec) if row.n < 2 or math.isnan(row.half_width) else \
            f"{row.mean:{spec}} ± {row.half_width:{spec}}"


def _link(run: StudyRun, base: Path) -> str:
    return Path(os.path.relpath(run.folder / "generations.md", base)).as_posix()


def _span(values: list[float]) -> str:
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return "—"
    low, high = min(values), max(values)
    return f"{low:.0f}" if low == high else f"{low:.0f}–{high:.0f}"


SUMMARY_HEADER = table_head(["model (samples)", "tokens", "params", "seeds", "trained on", "train s",
                             "val loss, nats/token (last / best)", "stateful (bits/char)", "stateless (bits/char)",
                             "gap (bits/char)", "bigram (bits/char)", "context horizon (tokens)", "known words",
                             "repeated 4-grams"], "llrrlrrrrrrrrr")


def summary_table(runs: list[StudyRun], frame: pd.DataFrame, summary: Summary, models: list[str],
                  base: Path, left_out: Collection[tuple[str, int]] = ()) -> list[str]:
    """One row per model in the order of `runs` (`in_study_order`), each figure mean ± half-width;
    the models of `models` without a full-scale run named in a sentence after the table. The name links to
    the samples of the model's first run (its pinned seed's, where there is one). The runs of
    `left_out` (model, seed) are not counted (another tokenizer)."""
    keep = [(m, int(s)) not in left_out for m, s in zip(frame["model"], frame["seed"])]
    frame = frame[pd.Series(keep, index=frame.index, dtype=bool)]
    full = [r for r in runs if not r.quick and (r.model, r.seed) not in left_out]
    present = list(dict.fromkeys(frame["model"]))
    lines = list(SUMMARY_HEADER)
    for model in present:
        mine = [r for r in full if r.model == model]
        rows = frame[frame["model"] == model]
        s = summary
        lines.append(
            f"| [{model}]({_link(mine[0], base)}) | {mine[0].metrics.get('tokens', '—')} "
            f"| {FIGURES['parameters'].text(s.mean(model, 'parameters'))} | {len(mine)} "
            f"| {'; '.join(dict.fromkeys(rows['machine']))} "
            f"| {FIGURES['train_seconds'].text(s.mean(model, 'train_seconds'))} "
            f"| {s.text(model, 'val_loss')} / {s.text(model, 'best_val_loss')} "
            f"| **{s.text(model, 'stateful_bpc')}** | {s.text(model, 'stateless_bpc')} | {s.text(model, 'gap_bpc')} "
            f"| {s.text(model, 'bigram_bpc')} | {_span(rows['context_horizon'].tolist())} "
            f"| {s.text(model, 'known_words_stateless')} / {s.text(model, 'known_words_stateful')} "
            f"| {s.text(model, 'repeated_4grams_stateless')} / {s.text(model, 'repeated_4grams_stateful')} |")
    untrained = [m for m in models if m not in present]
    if untrained:
        lines += ["", f"Not trained at full scale yet (no study run): {', '.join(untrained)}."]
    return lines


RUN_HEADER = table_head(["model", "seed", "trained on", "train s", "val loss, nats/token (last / best)",
                         "one batch, nats/token (last / best)", "stateful (bits/char)", "stateless (bits/char)",
                         "gap (bits/char)", "context horizon (tokens)", "from", "read as"], "lrlrrrrrrrll")


def run_row(run: StudyRun, figures: dict[str, float], base: Path, read_as: str = "—") -> str:
    """One run's row: its own figures (its row of the runs frame, written as the registry says), its
    name linking to its samples."""
    def text(name: str) -> str:
        return FIGURES[name].text(figures.get(name))

    one_batch = "—" if math.isnan(figures.get("val_batch_loss", math.nan)) else \
        f"{text('val_batch_loss')} / {text('best_val_batch_loss')}"
    return (f"| [{run.model}]({_link(run, base)}) | {run.seed if not run.quick else _fmt(run.params.get('seed'), 'd')} "
            f"| {run.where()} | {text('train_seconds')} | {text('val_loss')} / {text('best_val_loss')} "
            f"| {one_batch} | {text('stateful_bpc')} | {text('stateless_bpc')} | {text('gap_bpc')} "
            f"| {text('context_horizon')} | {run.source()} | {read_as} |")


def to_markdown(runs: list[StudyRun], frame: pd.DataFrame, summary: Summary, reading: Reading,
                models: list[str], study_dir: Path, markdown: Path, figure_name: str) -> str:
    """reports/study.md as text: the claims at a glance, the full-scale table of `models`, the findings
    of both passes, one row per run (full-scale, then quick) and the figure `figure_name`; links are
    relative to `markdown`'s folder, `study_dir` is named as where the run folders are."""
    base = markdown.parent
    full = [r for r in runs if not r.quick]
    quick = [r for r in runs if r.quick]
    folder = Path(os.path.relpath(study_dir, base)).as_posix()
    lines = [
        "# The study: every model, both inference modes, over seeds",
        "",
        "## At a glance",
        "",
        "Each claim of the study, judged by its registered rules on every run (exploratory) and on the seeds",
        "trained after the rules were registered (confirmatory); the detail is under [Findings](#findings).",
        "",
        *glance_table(reading.passes),
        "",
        "## Full scale",
        "",
        "Bits per character on the validation split. Stateless: the state is reset before every token;",
        "stateful: carried through the whole split; gap: stateless − stateful. Bigram: a count-based bigram of",
        "the model's own tokens, the best a model that sees one token can hope for. Context horizon: the fewest",
        "tokens of context from which fixed validation targets are predicted within the evaluate stage's",
        "tolerance of the stateful pass, as its range over seeds. Known words and repeated word 4-grams: text",
        "statistics of the sampled text, stateless / stateful. Validation loss in nats per token (per piece for",
        "Scribe). Each figure is the mean over the model's seeds ± the half-width of its 95% t-interval (the",
        "value alone for one seed); training seconds are the median over seeds (machines differ). Each model's",
        "name links to its pinned seed's samples, both modes side by side.",
        "",
        f"Built by `python -m rnnlm_study report` from the folders in `{folder}/` beside this file (one per",
        "model and seed, each with the provenance of its run), which `python -m rnnlm_study collect` fills;",
        f"`{folder}/runs.csv` holds every run's figures and `{folder}/summary.csv` every model's intervals.",
        "",
        *summary_table(runs, frame, summary, models, base, reading.other_tokenizer),
        "",
        *findings_markdown(reading.passes, list(reading.registered)),
        "## Every run",
        "",
        "One batch: the study's own validation estimator (the loss on one random batch of 64 windows), recorded",
        "beside the whole split by runs trained since it was added. Read as: *confirmatory* for a seed the",
        "registration names trained on code that descends from it, else *exploratory*; a SentencePiece run whose",
        "tokenizer is not the pipeline's is left out of the claims.",
        "",
        *RUN_HEADER,
        *(run_row(r, figures, base, reading.read_as(r)) for r, figures in zip(full, frame.to_dict("records"))),
        "",
    ]
    if quick:
        lines += ["## Quick runs (a fraction of the steps: not the study's numbers)", "", *RUN_HEADER,
                  *(run_row(r, run_figures(r), base, "not read") for r in quick), ""]
    lines += [f"![the study]({figure_name})", ""]
    return "\n".join(lines)


@dataclass(frozen=True)
class Reading:
    """How the report reads the runs: the registrations (the first, then each later one), which runs
    each counts as its own or leaves out, and the passes over the claims (exploratory and
    confirmatory under the first registration, then one per later registration)."""

    registered: tuple[Registration, ...]
    confirmatory: tuple[frozenset[tuple[str, int]], ...]  # per registration, the runs of its confirmatory pass
    other_tokenizer: dict[tuple[str, int], str]  # run -> why it is left out
    passes: list[Pass]

    @property
    def registration(self) -> Registration:
        """The first registration: the one that judges every claim."""
        return self.registered[0]

    def read_as(self, run: StudyRun) -> str:
        key = (run.model, run.seed)
        if key in self.other_tokenizer:
            return f"left out: {self.other_tokenizer[key]}"
        if key in self.confirmatory[0]:
            return "confirmatory"
        for registration, runs in zip(self.registered[1:], self.confirmatory[1:]):
            if key in runs:
                return f"confirmatory, {registration.name}"
            if run.seed in registration.seeds:
                return f"left out: a seed of {registration.name} outside its pass"
        return "exploratory"


def other_tokenizers(frame: pd.DataFrame) -> dict[tuple[str, int], str]:
    """The SentencePiece runs of `frame` tokenized by another SentencePiece than most of them (the
    pipeline's tokenizer; the registration's `same_tokenizer`), each with why (`rnnlm_study.piece_counts`)."""
    counted = frame[(frame["tokens"] == "sentencepiece") & frame["val_tokens"].notna()]
    return other_tokenizer_runs({(r.model, int(r.seed)): int(r.val_tokens) for r in counted.itertuples()})


def confirmatory_runs(runs: list[StudyRun], registration: Registration, repo: Path) -> frozenset[tuple[str, int]]:
    """The runs of a seed the registration names whose code git shows descends from the commit that
    added it (`trained_after`: the provenance's commit, never its own say); for a later
    registration, only runs of the models its rows name."""
    if registration.scope is not None:
        runs = [r for r in runs if r.seed in registration.seeds and r.model in registration.row_models]
    return frozenset((r.model, r.seed) for r in runs
                     if trained_after(repo, registration, r.seed, r.provenance, r.folder / "provenance.json"))


def _selected(evidence: Evidence, keep) -> Evidence:
    """The runs of `evidence` whose (model, seed) `keep` accepts."""
    frame = evidence.frame
    return evidence.where(pd.Series([bool(keep((m, int(s)))) for m, s in zip(frame["model"], frame["seed"])],
                                    index=frame.index, dtype=bool))


def read_runs(runs: list[StudyRun], frame: pd.DataFrame, study_dir: Path) -> Reading:
    """The registrations of `study_dir` and which runs came after each (from git), each run's reading,
    and the passes. A seed a later registration names is read by that registration's pass alone:
    never by the first registration's exploratory or confirmatory pass."""
    try:
        registered = sealed_registrations(study_dir)
        for registration in registered:
            check_claims(registration)
        repo = repository_of(study_dir)
        confirmed = tuple(confirmatory_runs(runs, registration, repo) for registration in registered)
    except RegistrationError as error:
        raise StudyReportError(str(error)) from None
    first_registration, later_seeds = registered[0], {s for r in registered[1:] for s in r.seeds}
    left_out = other_tokenizers(frame)
    sampling = TextSampling(first_registration.replicates, first_registration.generator_seed)
    everything = Evidence(frame, epochs_frame(runs), {r.model: r.shape for r in runs},
                          {(r.model, r.seed): r.blocks for r in runs if r.blocks is not None}, sampling)
    usable = _selected(everything, lambda key: key not in left_out)
    first = exploratory(_selected(usable, lambda key: key[1] not in later_seeds), first_registration)
    chosen = _selected(usable, lambda key: key in confirmed[0])
    note = "No confirmatory run collected yet." if chosen.frame.empty else ""
    passes = [first, confirmatory(chosen, first_registration, first, note)]
    for registration, runs in zip(registered[1:], confirmed[1:]):
        own = _selected(usable, lambda key, runs=runs: key in runs)
        own = replace(own, sampling=TextSampling(registration.replicates, registration.generator_seed))
        passes.append(later(own, registration, first))
    return Reading(tuple(registered), confirmed, left_out, passes)


def report(study_dir: Path, markdown: Path, figure: Path, params_path: str = "params.yaml") -> list[StudyRun]:
    """Write every output of the module docstring from the folders of `study_dir`; returns the runs."""
    params = load_params(params_path)
    models = list(params.models)
    runs = in_study_order(load_runs(study_dir), models, params.seed)
    if not runs:
        raise StudyReportError(f"{study_dir}: no study folders; run `python -m rnnlm_study collect` first")
    frame = runs_frame(runs)
    full = [r for r in runs if not r.quick]
    reading = read_runs(full, frame, study_dir)
    # One tokenizer per model everywhere: a run the claims leave out is left out of every summary too
    # (the table of every run lists it, saying why).
    kept = [r for r in runs if r.quick or (r.model, r.seed) not in reading.other_tokenizer]
    summary_rows = summary_frame(runs_frame(kept))
    summary = Summary(summary_rows)
    with AtomicFiles() as out:
        out.path(markdown).write_text(to_markdown(runs, frame, summary, reading, models, study_dir, markdown,
                                                  figure.name), encoding="utf-8")
        write_figure(kept, summary_rows, out.path(figure))
        out.path(study_dir / "runs.csv").write_text(csv_text(frame), encoding="utf-8")
        out.path(study_dir / "summary.csv").write_text(csv_text(summary_rows), encoding="utf-8")
        out.path(study_dir / "summary.json").write_text(summary_json(summary_rows), encoding="utf-8")
        record = findings_record(reading.passes, list(reading.registered))
        out.path(study_dir / "findings.json").write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n",
                                                         encoding="utf-8")
    return runs
