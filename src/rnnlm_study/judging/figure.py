"""reports/study.png: the study in one figure, each model's mean over its seeds with its 95% interval.

In:  the `StudyRun`s in the study's order (`rnnlm_study.folders.in_study_order`) and the summary frame
     (`rnnlm_study.judging.table.summary_frame`).
Out: a PNG of three panels: stateful and stateless bits per character per model with error bars,
     the bigram floor marked; the state-reset curves; the context curves (as the excess over the
     stateful pass); each curve the mean over seeds with a band for its interval (none for one seed).
     A model keeps one colour in every panel; one trained with the state carried is drawn dashed in
     the colour of its reset twin (the same sizes and tokens).
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pandas as pd

from rnnlm_study.study_run import StudyRun
from rnnlm_study.judging.stats import t_interval


def _reset_curve(run: StudyRun) -> dict[str, float]:
    return run.metrics.get("reset_curve_bpc", {})


def _context_excess(run: StudyRun) -> dict[str, float]:
    """Each context length's bits per character as % above the stateful pass."""
    context, stateful = run.metrics.get("context_curve_bpc"), run.metrics.get("context_stateful_bpc")
    return {c: 100 * (v / stateful - 1) for c, v in context.items()} if context and stateful else {}


def _mean_and_band(curves: list[dict[str, float]], keys: list[str]) -> tuple[list[float], list[float], list[float]]:
    """Per key: the mean over the curves that have it, and its 95% interval's bounds."""
    intervals = [t_interval([c[k] for c in curves if k in c]) for k in keys]
    return [i.estimate for i in intervals], [i.low for i in intervals], [i.high for i in intervals]


def _styles(by_model: dict[str, list[StudyRun]], palette: list) -> dict[str, dict[str, object]]:
    """Per model, its line's colour and dash: the reset-trained models take the palette's colours in
    turn; a carried model its twin's colour, dashed (its own colour when it has no twin)."""
    def key(model: str) -> tuple:
        return by_model[model][0].shape, by_model[model][0].tokens

    reset = [m for m in by_model if by_model[m][0].training == "reset"]
    colours = {m: palette[i % len(palette)] for i, m in enumerate(reset)}
    twins = {key(m): colours[m] for m in reset}
    styles = {m: {"color": colours[m], "linestyle": "-"} for m in reset}
    spare = itertools.cycle(palette[len(reset):] or palette)  # the colours no reset model took
    for model in by_model:
        if model not in styles:
            styles[model] = {"color": twins.get(key(model)) or next(spare), "linestyle": "--"}
    return styles


def _bars_panel(axes, ordered: list[str], by_model: dict[str, list[StudyRun]], summary: pd.DataFrame) -> None:
    """Stateful and stateless bits per character per model, with their intervals, and the bigram floor."""
    stats = summary.set_index(["model", "figure"])

    def column(figure: str, key: str) -> list[float]:
        return [float(stats.loc[(m, figure), key]) for m in ordered]

    x = range(len(ordered))
    for offset, figure, label in ((-0.2, "stateful_bpc", "stateful"), (0.2, "stateless_bpc", "stateless")):
        axes.bar([i + offset for i in x], column(figure, "mean"), width=0.4, label=label,
                 yerr=column(figure, "half_width"), capsize=3)
    axes.scatter(list(x), column("bigram_bpc", "mean"), marker="_", s=900, color="black", zorder=3,
                 label="bigram floor")
    axes.set_xticks(list(x), [f"{m}\n(n = {len(by_model[m])})" for m in ordered], fontsize=7, rotation=30)
    axes.set_ylabel("bits per character (validation), 95% interval over seeds")
    axes.legend()


def _reset_panel(axes, by_model: dict[str, list[StudyRun]], styles: dict[str, dict[str, object]]) -> None:
    """Each model's state-reset curve (mean over seeds, its band); "never" drawn one doubling past the largest k."""
    for model, runs in by_model.items():
        reset = [_reset_curve(r) for r in runs]
        keys = sorted({k for c in reset for k in c if k != "never"}, key=int)
        keys += ["never"] if any("never" in c for c in reset) else []
        finite = [int(k) for k in keys if k != "never"]
        points = [*finite, 2 * max(finite, default=1)][: len(keys)]
        mean, low, high = _mean_and_band(reset, keys)
        axes.plot(points, mean, marker="o", ms=3, label=model, **styles[model])
        axes.fill_between(points, low, high, color=styles[model]["color"], alpha=0.2, linewidth=0)
    axes.set_xscale("log", base=2)
    axes.set_xlabel("state reset every k tokens (the last point: never)")
    axes.set_ylabel("bits per character")
    axes.legend(fontsize=6)


def _context_panel(axes, by_model: dict[str, list[StudyRun]], styles: dict[str, dict[str, object]]) -> None:
    """Each model's context curve as % above its stateful pass (mean over seeds, its band); models
    without one are left out."""
    for model, runs in by_model.items():
        excess = [e for e in (_context_excess(r) for r in runs) if e]
        if not excess:
            continue
        keys = sorted({k for e in excess for k in e}, key=int)
        mean, low, high = _mean_and_band(excess, keys)
        axes.plot([int(k) for k in keys], mean, marker="o", ms=3, label=model, **styles[model])
        axes.fill_between([int(k) for k in keys], low, high, color=styles[model]["color"], alpha=0.2, linewidth=0)
    axes.set_xscale("log", base=2)
    axes.set_xlabel("tokens of context c (fixed targets, zero state before them)")
    axes.set_ylabel("% above the stateful pass")
    if axes.lines:
        axes.legend(fontsize=6)


def write_figure(runs: list[StudyRun], summary: pd.DataFrame, path: Path) -> None:
    """Draw the figure of `runs` (in the study's order) into `path` (a PNG, whatever its name ends with)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    full = [r for r in runs if not r.quick]
    ordered = list(dict.fromkeys(r.model for r in full))  # `runs` come in the study's order
    by_model = {m: [r for r in full if r.model == m] for m in ordered}
    styles = _styles(by_model, list(plt.get_cmap("tab20" if len(ordered) > 10 else "tab10").colors))
    fig, (bars, curves, contexts) = plt.subplots(1, 3, figsize=(20, 5.5), gridspec_kw={"width_ratios": [1.3, 1, 1]})
    _bars_panel(bars, ordered, by_model, summary)
    _reset_panel(curves, by_model, styles)
    _context_panel(contexts, by_model, styles)
    fig.suptitle("Stateless vs stateful over seeds: each model against the bigram floor, its state-reset curve and "
                 "its context curve (bands and bars: 95% intervals)")
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=110, metadata={"Software": None})
    plt.close(fig)
