"""The Findings section of reports/study.md and the README's verdict lines, rendered from the passes
(`rnnlm_study.judging.findings`): every sentence's numbers are read from the same objects that print the
tables.
"""

from __future__ import annotations

import re

from rnnlm.reporting.markdown import table_head
from rnnlm_study.judging.evidence import Comparison
from rnnlm_study.judging.findings import EXPLORATORY, Conclusion, Finding, Pass, conclusion
from rnnlm_study.registration import Registration
from rnnlm_study.judging.rules import UNITS
from rnnlm_study.judging.verdicts import CONTRADICTED, SUPPORTED

PER_SEED_UP_TO = 5
"""Rows of at most this many runs per model show every run's value."""


def _p(p: float | None) -> str:
    return "—" if p is None else "< 0.001" if p < 0.001 else f"{p:.3f}"


def _per_run(c: Comparison) -> str:
    if any(len(side) > PER_SEED_UP_TO for side in c.values) or not c.measured:
        return "—"
    sides = [", ".join(f"{v:+.3f}" for v in side) for side in c.values]
    return sides[0] if len(sides) == 1 else " · ".join(f"{m}: {s}" for m, s in zip(c.models, sides))


def _exact(c: Comparison, level: float) -> str:
    test = c.exact()
    if test is None:
        return "none (its variance adds the study's one-batch noise)" if c.kind == "band" else "—"
    if min(1.0, 2 * test.smallest) > level:
        return f"cannot reach {level:g} at n = {test.n} (p ≥ {test.smallest:.3f} one-sided)"
    decision = c.exact_decision
    return f"{_p(decision.adjusted_p)}, {decision.verdict}" if decision else "—"


def _verdict_cell(c: Comparison) -> str:
    notes = [c.note] if c.note else []
    exact = c.exact_decision
    if c.verdict.decided and exact is not None and exact.verdict != c.verdict:
        notes.append("t only")
    elif exact is not None and exact.verdict.decided and exact.verdict != c.verdict:
        notes.append(f"exact test: {exact.verdict}")
    if c.alone != c.verdict:
        notes.append(f"{c.alone} at 95% alone")
    return f"{c.verdict}" + (f" ({'; '.join(notes)})" if notes else "")


def _text(c: Comparison) -> str:
    if c.text is None:
        return "—"
    return f"[{c.text.low:+.3f}, {c.text.high:+.3f}], ×{c.text.wider:.2f}"


def comparison_table(finding: Finding, level: float) -> list[str]:
    """One row per comparison: estimate, t interval, n, per-run values, rule, the claimed side's p,
    the deciding (Holm-adjusted) p, the verdict, the exact test, the interval with the text resampled
    too and the seeds that would decide it."""
    units = {UNITS.get(r.unit, r.unit) for r in finding.registered.rules.values()}
    unit = units.pop() if len(units) == 1 else "see rule"
    lines = table_head(["comparison", f"estimate ({unit})", "± 95% (t)", "n", f"per run (n ≤ {PER_SEED_UP_TO})",
                        "rule", "p, claimed side (one-sided)", f"p deciding (Holm, {level:g} per claim)", "verdict",
                        "exact test: p deciding (Holm), verdict", "95% with seeds and text resampled, × seeds-only",
                        "seeds to decide (80% power)"], "lrrrllrrlllr")
    for c in finding.comparisons:
        measured = c.measured
        lines.append(
            f"| {c.label} | {f'{c.interval.estimate:+.3f}' if measured else '—'} | "
            f"{'—' if not measured or c.interval.one_run else f'{c.interval.half_width:.3f}'} | {c.interval.n} | "
            f"{_per_run(c)} | {c.rule.sentence()} | {_p(c.p)} | "
            f"{_p(c.decision.adjusted_p) if c.decision else '—'} | {_verdict_cell(c)} | {_exact(c, level)} | "
            f"{_text(c)} | {'—' if c.needed is None else c.needed} |")
    return lines


def sensitivity_table(finding: Finding) -> list[str]:
    """Per rule of the claim, the verdict of each of its rows and of the claim at each edge of the
    registered grid (the registered edge in bold)."""
    lines: list[str] = []
    for name, claim_verdicts in finding.sensitivity.items():
        registered = finding.registered.rule(name)
        heads = [f"**{e:+g}**" if e == registered.edge else f"{e:+g}" for e, _ in claim_verdicts]
        what = "band ±" if registered.kind == "within" else "edge"
        lines += [*table_head([f"{registered.figure} ({UNITS.get(registered.unit, registered.unit)}), at the {what}",
                               *heads], "l" + "l" * len(heads))]
        lines += [f"| {c.label} | " + " | ".join(str(v) for _, v in c.grid) + " |"
                  for c in finding.comparisons if c.rule_name == name and c.grid]
        lines.append(f"| the claim ({finding.registered.form}) | " + " | ".join(f"**{v}**" for _, v in claim_verdicts)
                     + " |")
        lines.append("")
    return lines


def short_names(finding: Finding) -> dict[str, str]:
    """Each row's short name: its model, or the two it sets against each other; with the rule's
    figure where two rows of the claim would share a name."""
    names = {c.label: " − ".join(c.models) for c in finding.comparisons}
    taken = list(names.values())
    return {c.label: names[c.label] + (f" ({finding.registered.rule(c.rule_name).figure})"
                                       if taken.count(names[c.label]) > 1 else "") for c in finding.comparisons}


def _rows_by_verdict(finding: Finding) -> str:
    """Which rows each verdict holds, read from the verdicts."""
    groups: dict[str, list[str]] = {}
    names = short_names(finding)
    for c in finding.comparisons:
        if c.measured:
            groups.setdefault(c.verdict.word if c.verdict.decided else "open", []).append(names[c.label])
    order = [SUPPORTED.word, CONTRADICTED.word, "open"]
    return "; ".join(f"{w}: {', '.join(groups[w])}" for w in order if w in groups)


def _row_name(label: str) -> str:
    """A row's label without its unit ("gap: astra_beta − astra_alpha")."""
    return re.sub(r" \([^)]*\)$", "", label)


def _waiting(finding: Finding) -> str:
    """The rows a pass cannot judge yet, grouped by what they wait for."""
    groups: dict[str, list[str]] = {}
    for label, why in finding.waiting:
        groups.setdefault(why, []).append(_row_name(label))
    return "; ".join(f"{why}: {', '.join(labels)}" for why, labels in groups.items())


def history_note(registration: Registration, number: int) -> str:
    """When the claim's rule was set, relative to when its data was first committed."""
    history = registration.claim(number).history
    rules, data = history.get("rule_set") or [], history.get("data_first_committed")
    if not rules or not data:
        return "its history was not recorded"
    first, last = rules[0], rules[-1]
    when = (f"rule first set {first['date'][:10]} ({first['commit'][:7]})" +
            (f", last changed {last['date'][:10]} ({last['commit'][:7]})" if len(rules) > 1 else ""))
    before = last["date"] < data["date"]
    note = (f"{when}; its data first committed {data['date'][:10]} ({data['commit'][:7]}): "
            + ("the rule's edges were fixed before its data existed" if before else
               "the rule was set with data in view, so this reading is exploratory"))
    if registration.sealed_by and registration.sealed_date and data["date"] < registration.sealed_date:
        note += (f"; its form (*{registration.claim(number).form}*) was first fixed by this registration "
                 f"({registration.sealed_by[:7]}, {registration.sealed_date[:10]}), after its data was committed, so "
                 "the form too was chosen with data in view")
    return note


def judged_rows(finding: Finding) -> str:
    """The rows a pass judged, each with its verdict, and how many wait: what a verdict on part of
    its rows rests on ("gap: astra_beta − astra_alpha — supported, gap: scribe_beta − scribe_alpha — contradicted")."""
    rows = ", ".join(f"{_row_name(c.label)} — {c.verdict}" for c in finding.comparisons if c.measured)
    return f"{rows}; {len(finding.waiting)} waiting"


def _verdict_line(finding: Finding, one_pass: Pass) -> str:
    rows = [c for c in finding.comparisons if c.measured]
    if not rows:
        return f"**{one_pass.name.capitalize()} verdict: none yet** (no row judged)."
    scope = ""
    if one_pass.name != EXPLORATORY and finding.waiting:
        scope = f" on the {len(rows)} row{'s' if len(rows) != 1 else ''} judged ({judged_rows(finding)})"
    return f"**{one_pass.name.capitalize()} verdict: {finding.verdict}**{scope}."


def _deviation(passes: list[Pass], registration: Registration) -> list[str]:
    """The one way this report departs from the registration as written, said where it applies."""
    beyond = beyond_registration(passes)
    if not beyond:
        return []
    return [f"**A deviation from `{registration.path.name}`, stated.** Each claim lists the rows its confirmatory pass",
            "judges (`confirmatory_rows`) and the registration names the models whose confirmatory seeds it expected first",
            "(`confirmatory.models`), noting that the large and the carried models' seeds would come later. This report",
            "judges their rows in the confirmatory pass too, as those seeds arrive, in the same Holm family as the",
            "registered rows (a larger family only raises the registered rows' deciding p). The rows beyond the",
            f"registered ones: {'; '.join(beyond)}. findings.json marks each row (`registered_row`).", ""]


def findings_markdown(passes: list[Pass], registered: list[Registration]) -> list[str]:
    """The Findings section of reports/study.md, as lines: how claims are judged, then one section per
    claim (`registered`: the first registration, then each later one, as `passes[2:]` follow them)."""
    registration = registered[0]
    lines = ["## Findings", "", *_method(passes, registration, registration.sealed_by), *_later_method(registered[1:])]
    for first in passes[0].findings:
        judging = [(p.finding(first.number), p) for p in passes if p.finding(first.number) is not None]
        lines += _claim_section(judging, passes, registered)
    return lines


def _later_method(later: list[Registration]) -> list[str]:
    """A paragraph per later registration: what it judges again, on which seeds, and that it never
    pools them with an earlier registration's."""
    lines = []
    for registration in later:
        claims = ", ".join(str(n) for n in registration.scope or ())
        lines += [f"*{registration.name.capitalize()}* (`{registration.path.name}`, sha256 "
                  f"`{registration.sha256[:16]}…`, commit {str(registration.sealed_by)[:7]}, {registration.date}) judges "
                  f"claim{'s' if len(registration.scope or ()) > 1 else ''} {claims} again, on the rows it names alone "
                  f"and on its own seeds ({', '.join(str(s) for s in registration.seeds)}), trained on code that "
                  f"descends from it; a row is judged once each of its models has {registration.at_least} of them, the "
                  "number its power computation fixed before any trained. It was written with the first confirmatory "
                  "pass in view, which chose its rows (each claim says why). Its seeds count in its own pass alone: "
                  "neither pass above reads them, and it reads no run of theirs.", ""]
    return lines


def _method(passes: list[Pass], registration: Registration, registered_by: str | None) -> list[str]:
    """The paragraphs that say how every claim is judged: the registration, the two passes, the tests."""
    commit = f"commit {registered_by[:7]}" if registered_by else "not committed"
    return [f"Each claim of the study is judged by the rules registered in `{registration.path.name}` (beside the run",
            f"folders; sha256 `{registration.sha256[:16]}…`, {commit}, {registration.date}): its question, its logical",
            "form, every rule's edge and unit, the sensitivity grid, the tests and the family-wise level. Each claim is",
            "judged twice. *Exploratory*: every run collected; most rules were set with some of those runs in view",
            "(each claim says when). *Confirmatory*: only the seeds the registration names "
            f"({', '.join(str(s) for s in registration.seeds)}), trained",
            "on code that descends from the registering commit; a row is judged once each of its models has "
            f"{registration.at_least} such seeds. The exploratory pass pools every run, the confirmatory seeds",
            "included, so the two passes share those runs and are not independent: the confirmatory pass alone",
            "tests the registered rules on data they were not set beside.", "",
            *_deviation(passes, registration),
            "Every comparison has a 95% interval over seeds (Student's t over one model's seeds, paired per run when",
            "both figures come from the same weights, Welch's between two models), the one-sided p of the claimed",
            "direction and the deciding p: its directional test after Holm's step-down over the claim's rows (a",
            f"family-wise error of {registration.level:g} per claim and pass); the verdict is *supported* or "
            "*contradicted* when that",
            "p is at most the level, by the side the interval clears, else *inconclusive at n = k*. Beside it, an exact",
            "test (sign flips for one model or a paired figure, permutations of runs between two models) decided the",
            "same way; *t only* marks a verdict the exact test does not reach. Where the runs carry their validation",
            "blocks, a second interval resamples the seeds and the text together. A claim's verdict follows its form:",
            "*all* (one contradicted row contradicts it), *any*, or *list* (separate statements; the only form that may",
            "read *mixed*). The sensitivity tables give the verdicts at the other edges of each registered grid.", ""]


def _claim_section(judging: list[tuple[Finding, Pass]], passes: list[Pass], registered: list[Registration]) -> list[str]:
    """One claim's section: its words, its verdict in each pass that judges it, its question, form,
    rules and history, then what each pass found, then, where a later registration judged it again,
    that registration's reasons and what the study concludes."""
    first, claim = judging[0][0], judging[0][0].registered
    rules = "; ".join(f"{r.figure} {('above ' if r.kind == 'above' else 'within ±')}{r.edge:g} "
                      f"{UNITS.get(r.unit, r.unit)} ({r.why})" for r in claim.rules.values())
    lines = [f"### {first.number}. {claim.text}", "",
             " ".join(_verdict_line(f, p) for f, p in judging), "",
             f"Question: {claim.question} Form: *{claim.form}*: {claim.why_form} Rules: {rules}. "
             f"History: {history_note(registered[0], first.number)}.", ""]
    by_name = {r.name: r for r in registered}
    for finding, one_pass in judging:
        if one_pass.name in by_name:
            lines += _later_reasons(by_name[one_pass.name], first.number)
        lines += _pass_section(finding, one_pass, by_name.get(one_pass.name, registered[0]).level)
    ends = conclusion(first.number, passes)
    if ends is not None:
        lines += [_conclusion_line(ends), ""]
    return lines


def _later_reasons(registration: Registration, number: int) -> list[str]:
    """Why a later registration names the rows it names and leaves out the others, and how it fixed
    each row's seeds, as its file says."""
    raw = registration.raw["claims"][number]
    lines = [f"**{registration.name.capitalize()}: its rows.** {' '.join(str(raw.get('why_rows', '')).split())}", ""]
    for model, why in (raw.get("left_out") or {}).items():
        lines += [f"Left out: {model}. {' '.join(str(why).split())}", ""]
    for row, plan in (raw.get("power") or {}).items():
        inputs = plan.get("inputs", {})
        lines += [f"Seeds of {row}: n = {plan.get('n')}, for 80% power at the first pass's estimate "
                  f"{inputs.get('estimate'):+.3f} and sd {inputs.get('sd'):.3f} (n = {inputs.get('n_seen')}): "
                  f"{' '.join(str(plan.get('method', '')).split())}", ""]
    return lines


def _conclusion_line(ends: Conclusion) -> str:
    """The study's conclusion of a claim judged again: its verdict, and each row's with the pass that
    decided it."""
    rows = "; ".join(f"{_row_name(label)} — {verdict} ({name})" for label, verdict, name in ends.rows)
    waiting = f"; {len(ends.waiting)} row{'s' if len(ends.waiting) != 1 else ''} waiting ({', '.join(_row_name(w) for w in ends.waiting)})" \
        if ends.waiting else ""
    return (f"**The study concludes: {ends.verdict}**, by the claim's form over each confirmatory row at its newest "
            f"judgement, never pooled: {rows}{waiting}.")


def _pass_section(finding: Finding, one_pass: Pass, level: float) -> list[str]:
    """What one pass found for one claim: its comparisons and their verdicts by row, the sensitivity
    table, the rows it waits for, and the claim's own figures (the confirmatory pass shows them only
    once it has judged a row)."""
    lines = [f"**{one_pass.name.capitalize()}.**" + (f" {one_pass.note}" if one_pass.note else ""), ""]
    if finding.comparisons:
        lines += [*comparison_table(finding, level), ""]
        summary = _rows_by_verdict(finding)
        if summary:
            lines += [f"Rows — {summary}.", ""]
        lines += sensitivity_table(finding)
    if finding.waiting:
        lines += [f"Not judged in this pass: {_waiting(finding)}.", ""]
    if one_pass.name == EXPLORATORY or finding.comparisons:
        if len(finding.judged.table) > 2:
            lines += [*finding.judged.table, ""]
        lines += [*finding.judged.extra]
        if finding.judged.insight:
            lines += [finding.judged.insight, ""]
    return lines


def replicated(exploratory_finding: Finding, confirmatory_finding: Finding) -> str:
    """Whether the confirmatory pass reads as the exploratory one: yes or no where it is decided,
    else why not."""
    if not any(c.measured for c in confirmatory_finding.comparisons):
        return "not yet"
    verdict, before = confirmatory_finding.verdict, exploratory_finding.verdict
    if not verdict.decided:
        return f"undecided ({verdict})"
    if not before.decided:
        return f"nothing to replicate (exploratory {before})"
    return "yes" if verdict == before else "no"


def glance_table(passes: list[Pass]) -> list[str]:
    """The study at a glance: per claim its words, form, the verdict of each pass, whether the
    confirmatory pass replicates the exploratory one, and the rows it still waits for."""
    first, second, *later = passes
    lines = table_head(["claim", "form", "exploratory", "confirmatory", "replicated", "rows still waiting",
                        *(f"{p.name} (its rows)" for p in later)], "llllll" + "l" * len(later))
    for explored, confirmed in zip(first.findings, second.findings):
        judged = [c for c in confirmed.comparisons if c.measured]
        again = [_again(p.finding(explored.number)) for p in later]
        lines.append(f"| {explored.number}. {explored.registered.text} | {explored.registered.form} "
                     f"| {explored.verdict} | {confirmed.verdict if judged else 'none yet'} "
                     f"| {replicated(explored, confirmed)} | {_waiting(confirmed) or '—'} |"
                     + "".join(f" {cell} |" for cell in again))
    return lines


def _again(finding: Finding | None) -> str:
    """A later registration's cell of the glance table: "—" for a claim it does not judge."""
    if finding is None:
        return "—"
    if not any(c.measured for c in finding.comparisons):
        return f"none yet ({_waiting(finding)})" if finding.waiting else "none yet"
    return f"{finding.verdict}" + (f" ({_waiting(finding)})" if finding.waiting else "")


def beyond_registration(passes: list[Pass]) -> list[str]:
    """Per claim, the rows the confirmatory pass judges (or waits for) that the registration does not
    name among its `confirmatory_rows`, as short names."""
    lines = []
    for finding in passes[0].findings:
        names = short_names(finding)
        beyond = [names[c.label] for c in finding.comparisons if not finding.registered.registers_row(c.models)]
        if beyond:
            lines.append(f"claim {finding.number}: {', '.join(beyond)}")
    return lines

