"""The Findings section of reports/study.md and the README's verdict lines, rendered from the passes
(`rnnlm.study.judging.findings`): every sentence's numbers are read from the same objects that print the
tables.
"""

from __future__ import annotations

import re

from rnnlm.reporting.markdown import table_head
from rnnlm.study.judging.evidence import Comparison
from rnnlm.study.judging.findings import CONFIRMATORY, Finding, Pass
from rnnlm.study.registration import Registration
from rnnlm.study.judging.rules import UNITS
from rnnlm.study.judging.verdicts import CONTRADICTED, SUPPORTED

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
    if one_pass.name == CONFIRMATORY and finding.waiting:
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


def findings_markdown(passes: list[Pass], registration: Registration, registered_by: str | None) -> list[str]:
    """The Findings section of reports/study.md, as lines: how claims are judged, then one section per claim."""
    lines = ["## Findings", "", *_method(passes, registration, registered_by)]
    for i in range(len(passes[0].findings)):
        lines += _claim_section([p.findings[i] for p in passes], passes, registration)
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


def _claim_section(findings: list[Finding], passes: list[Pass], registration: Registration) -> list[str]:
    """One claim's section: its words, its verdict in each pass, its question, form, rules and history,
    then what each pass found (`findings[k]` is the claim in `passes[k]`)."""
    first, claim = findings[0], findings[0].registered
    rules = "; ".join(f"{r.figure} {('above ' if r.kind == 'above' else 'within ±')}{r.edge:g} "
                      f"{UNITS.get(r.unit, r.unit)} ({r.why})" for r in claim.rules.values())
    lines = [f"### {first.number}. {claim.text}", "",
             " ".join(_verdict_line(f, p) for f, p in zip(findings, passes)), "",
             f"Question: {claim.question} Form: *{claim.form}*: {claim.why_form} Rules: {rules}. "
             f"History: {history_note(registration, first.number)}.", ""]
    for finding, one_pass in zip(findings, passes):
        lines += _pass_section(finding, one_pass, registration.level)
    return lines


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
    if one_pass.name != CONFIRMATORY or finding.comparisons:
        if len(finding.judged.table) > 2:
            lines += [*finding.judged.table, ""]
        lines += [*finding.judged.extra]
        if finding.judged.insight:
            lines += [finding.judged.insight, ""]
    return lines


def verdict_lines(passes: list[Pass], link: str) -> list[str]:
    """One line per claim: its number, its verdict in each pass and the claim, linking to `link`#findings."""
    lines = []
    for i, first in enumerate(passes[0].findings):
        verdicts = "; ".join(f"{p.name}: {_short(p.findings[i])}" for p in passes)
        lines.append(f"{first.number}. **{verdicts}**: {first.registered.text} ([figures]({link}#findings))")
    return lines


def _short(finding: Finding) -> str:
    rows = sum(c.measured for c in finding.comparisons)
    if not rows:
        return "no rows judged yet"
    return f"{finding.verdict}" + (f" ({judged_rows(finding)})" if finding.waiting else "")


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
    first, second = passes
    lines = table_head(["claim", "form", "exploratory", "confirmatory", "replicated", "rows still waiting"],
                       "llllll")
    for explored, confirmed in zip(first.findings, second.findings):
        judged = [c for c in confirmed.comparisons if c.measured]
        lines.append(f"| {explored.number}. {explored.registered.text} | {explored.registered.form} "
                     f"| {explored.verdict} | {confirmed.verdict if judged else 'none yet'} "
                     f"| {replicated(explored, confirmed)} | {_waiting(confirmed) or '—'} |")
    return lines


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

