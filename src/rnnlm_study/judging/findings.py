"""The study's claims judged by their registered rules, in two passes.

In:  the runs (`Evidence`: one row per model and seed, every run's validation curve, each model's
     shape, each run's validation blocks), the registration (`rnnlm_study.registration`), and which
     runs are confirmatory (seeds the registration names, trained on code that descends from it).
Out: a `Pass` per reading: *exploratory* (every run) and *confirmatory* (the confirmatory runs
     alone; a row whose models have fewer than the registered seeds waits), then one per later
     registration (`later`: the claims of its scope, on its own seeds alone). In each, per claim a
     `Finding`: its comparisons decided together (Holm's step-down at the registered level, on the
     t-intervals and, beside them, on the exact tests), each row's verdicts at the other edges of
     its registered sensitivity grid, and the claim's verdict by its logical form
     (`rnnlm_study.judging.verdicts.by_form`); `conclusion` reads a claim judged again by a later
     registration across the passes. `findings_record` gives reports/study/findings.json;
     `rnnlm_study.judging.findings_markdown` renders the passes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

from rnnlm_study.judging.claims import CLAIMS, Judgement
from rnnlm_study.judging.evidence import Comparison, Evidence, rounded
from rnnlm_study.registration import RegisteredClaim, Registration, RegistrationError
from rnnlm_study.judging.rules import Decision, decide, interval_tests
from rnnlm_study.judging.verdicts import Verdict, by_form

EXPLORATORY, CONFIRMATORY = "exploratory", "confirmatory"


@dataclass(frozen=True)
class Finding:
    """One claim in one pass: its judged rows and what they decide."""

    number: int
    registered: RegisteredClaim
    judged: Judgement
    waiting: tuple[tuple[str, str], ...] = ()  # (row, what it waits for): rows this pass cannot judge yet
    sensitivity: dict[str, tuple[tuple[float, Verdict], ...]] = field(default_factory=dict)  # rule -> claim verdicts

    @property
    def comparisons(self) -> list[Comparison]:
        return self.judged.comparisons

    @property
    def verdict(self) -> Verdict:
        return by_form([c.verdict for c in self.comparisons], self.registered.form)


@dataclass(frozen=True)
class Pass:
    """One reading of the claims: which runs it reads, and what it finds (every claim, or a later
    registration's scope)."""

    name: str
    findings: list[Finding]
    note: str = ""  # why the pass judges nothing, where it cannot

    @property
    def key(self) -> str:
        """Its key in findings.json ("registration_2")."""
        return self.name.replace(" ", "_")

    def finding(self, number: int) -> Finding | None:
        """Its finding for claim `number`, or None where it does not judge that claim."""
        return next((f for f in self.findings if f.number == number), None)


@dataclass(frozen=True)
class Conclusion:
    """What the study concludes of a claim that a later registration judged again: each row of the
    first confirmatory pass with its verdict from the newest pass that judged it, and the claim's
    verdict by its form over those rows."""

    verdict: Verdict
    rows: tuple[tuple[str, Verdict, str], ...]  # (row, its verdict, the pass that decided it)
    waiting: tuple[str, ...] = ()  # rows of the first confirmatory pass that no pass has judged yet


def _decisions(rows: list[Comparison], level: float, rules: dict[str, float] | None = None
               ) -> tuple[list[Decision], list[Decision | None]]:
    """Holm over `rows` on their t-intervals and on their exact tests, each row at its rule's edge
    or, for the rules `rules` names, at the edge given there."""
    at = [c.rule.at(rules[c.rule_name]) if rules and c.rule_name in rules else c.rule for c in rows]
    t = decide(interval_tests([(r, c.interval) for r, c in zip(at, rows)]), level)
    exact_tests = [c.exact(r) for r, c in zip(at, rows)]
    exact = decide([(e.above, e.below, e.n) if e else (None, None, c.interval.n) for e, c in zip(exact_tests, rows)],
                   level)
    return t, [d if e is not None else None for d, e in zip(exact, exact_tests)]


def decide_claim(number: int, registered: RegisteredClaim, judged: Judgement, level: float,
                 waiting: dict[str, str] | None = None) -> Finding:
    """Decide a claim's measured rows together (those in `waiting` left out, with what they wait
    for), at its registered edges and at each edge of each rule's sensitivity grid."""
    waiting = waiting or {}
    rows = [c for c in judged.comparisons if c.measured and c.label not in waiting]
    t, exact = _decisions(rows, level)
    grids: dict[str, list[tuple[float, Verdict]]] = {c.label: [] for c in rows}  # row -> (edge, its verdict)
    sensitivity: dict[str, list[tuple[float, Verdict]]] = {}  # rule -> (edge, the claim's verdict)
    for name, edge, at_edge in _at_each_edge(rows, level, registered):
        for c, d in zip(rows, at_edge):
            if c.rule_name == name:
                grids[c.label].append((edge, d.verdict))
        sensitivity.setdefault(name, []).append((edge, by_form([d.verdict for d in at_edge], registered.form)))
    decided = {c.label: replace(c, decision=d, exact_decision=e, grid=tuple(grids[c.label]))
               for c, d, e in zip(rows, t, exact)}
    comparisons = [decided.get(c.label, c) for c in judged.comparisons if c.label not in waiting]
    return Finding(number, registered, replace(judged, comparisons=comparisons), tuple(waiting.items()),
                   {name: tuple(verdicts) for name, verdicts in sensitivity.items()})


def _at_each_edge(rows: list[Comparison], level: float,
                  registered: RegisteredClaim) -> Iterator[tuple[str, float, list[Decision]]]:
    """For each registered rule that judges one of `rows`, at each edge of its sensitivity grid:
    (the rule's name, the edge, every row's decision with that rule moved to that edge)."""
    for name, registered_rule in registered.rules.items():
        if any(c.rule_name == name for c in rows):
            for edge in registered_rule.grid:
                yield name, edge, _decisions(rows, level, {name: edge})[0]


def check_claims(registration: Registration) -> None:
    """RegistrationError unless the registration registers each claim of `CLAIMS` (numbered 1, 2, ...;
    a later registration, each claim of its scope) with every rule its judge reads (a claim or a rule
    renamed or left out would stop the judging)."""
    for number, claim in enumerate(CLAIMS, start=1):
        if registration.scope is not None and number not in registration.scope:
            continue
        registered = registration.claims.get(number)
        if registered is None:
            raise RegistrationError(f"{registration.path}: no claim {number}; expected claims 1 to {len(CLAIMS)}")
        missing = [name for name in claim.rules if name not in registered.rules]
        if missing:
            raise RegistrationError(f"{registration.path}: claims.{number}.rules has no {', '.join(missing)}; expected "
                                    f"the rules {', '.join(claim.rules)}")
    beyond = [number for number in registration.scope or () if not 1 <= number <= len(CLAIMS)]
    if beyond:
        raise RegistrationError(f"{registration.path}: scope names claim {beyond[0]}; expected claims 1 to {len(CLAIMS)}")


def exploratory(evidence: Evidence, registration: Registration) -> Pass:
    """Every claim judged on every run of its recipes."""
    found = [decide_claim(number, registration.claim(number), claim.judge(evidence.trained(claim.recipes),
                                                                          registration.claim(number)),
                          registration.level)
             for number, claim in enumerate(CLAIMS, start=1)]
    return Pass(EXPLORATORY, found)


def _waiting(judged: Judgement, evidence: Evidence, at_least: int, whose: str) -> dict[str, str]:
    """The rows of `judged` whose models have fewer than `at_least` runs in `evidence`, each with
    what it waits for ("waits for 2 more of beta (confirmatory seeds)")."""
    waiting = {}
    for c in judged.comparisons:
        short = [f"{at_least - evidence.n(m)} more of {m}" for m in c.models if evidence.n(m) < at_least]
        if short:
            waiting[c.label] = f"waits for {' and '.join(short)} ({whose})"
    return waiting


def confirmatory(evidence: Evidence, registration: Registration, exploratory_pass: Pass, note: str = "") -> Pass:
    """Every claim judged on the confirmatory runs alone (`evidence` holds only those): a row whose
    models have fewer than the registered seeds each waits, and a row of the exploratory pass with
    no confirmatory run at all says so."""
    found = [_on_own_runs(number, evidence, registration, exploratory_pass, "confirmatory seeds",
                          "no confirmatory runs yet") for number in range(1, len(CLAIMS) + 1)]
    return Pass(CONFIRMATORY, found, note)


def later(evidence: Evidence, registration: Registration, exploratory_pass: Pass) -> Pass:
    """The claims a later registration judges again (its `scope`), each on the rows it registers
    alone and on its own runs alone (`evidence` holds only those, never an earlier registration's):
    a row whose models have fewer than its seeds waits, and a registered row with no run of its
    yet says so (named as the exploratory pass names it)."""
    found = [_on_own_runs(number, evidence, registration, exploratory_pass, f"seeds of {registration.name}",
                          f"no runs of {registration.name} yet", registration.claim(number).registers_row)
             for number in registration.scope or ()]
    return Pass(registration.name, found, "" if not evidence.frame.empty else f"No run of {registration.name} "
                "collected yet.")


def _on_own_runs(number: int, evidence: Evidence, registration: Registration, exploratory_pass: Pass, whose: str,
                 none_yet: str, keep: Callable[[tuple[str, ...]], bool] = lambda models: True) -> Finding:
    """Claim `number` judged on one registration's own runs (`evidence`), on the rows whose models
    `keep` accepts: a row whose models have fewer than its seeds waits ("waits for ... (`whose`)"), and a
    row of the exploratory pass with no run here says `none_yet`."""
    claim, registered = CLAIMS[number - 1], registration.claim(number)
    judged = claim.judge(evidence.trained(claim.recipes), registered) if not evidence.frame.empty else \
        Judgement([], "")
    judged = replace(judged, comparisons=[c for c in judged.comparisons if keep(c.models)])
    waiting = _waiting(judged, evidence, registration.at_least, whose)
    here = {c.label for c in judged.comparisons}
    absent = {c.label: none_yet for c in exploratory_pass.findings[number - 1].comparisons
              if c.measured and keep(c.models) and c.label not in here}
    finding = decide_claim(number, registered, judged, registration.level, waiting)
    return replace(finding, waiting=finding.waiting + tuple(absent.items()))


def conclusion(number: int, passes: list[Pass]) -> Conclusion | None:
    """What the study concludes of claim `number` where a later registration judged it again: the
    rows of the confirmatory pass (`passes[1]`), each with the verdict of the newest pass that judged
    it (a later registration's rows replace the same rows of the earlier passes, never pooled with
    them), and the claim's verdict by its form over them. None where no later pass judges the claim."""
    later_findings = [(p.name, p.finding(number)) for p in passes[2:] if p.finding(number) is not None]
    if not later_findings:
        return None
    first = passes[1].finding(number)
    rows = {c.label: (c.verdict, passes[1].name) for c in first.comparisons if c.measured}
    for name, finding in later_findings:
        rows.update({c.label: (c.verdict, name) for c in finding.comparisons if c.measured})
    waiting = tuple(label for label, _ in first.waiting if label not in rows)
    return Conclusion(by_form([verdict for verdict, _ in rows.values()], first.registered.form),
                      tuple((label, verdict, name) for label, (verdict, name) in rows.items()), waiting)


# ----- the record ---------------------------------------------------------------------------------

def _comparison_record(c: Comparison, registered: bool) -> dict[str, object]:
    finite = c.measured
    exact = c.exact() if finite else None
    return {"comparison": c.label, "rule": c.rule.sentence(),
            "estimate": rounded(c.interval.estimate) if finite else None,
            "low": rounded(c.interval.low) if finite and not c.interval.one_run else None,
            "high": rounded(c.interval.high) if finite and not c.interval.one_run else None,
            "n": c.interval.n, "per_run": [[rounded(v) for v in side] for side in c.values],
            "p_one_sided": None if c.p is None else rounded(c.p),
            "p_deciding": None if c.decision is None or c.decision.adjusted_p is None else rounded(c.decision.adjusted_p),
            "verdict": str(c.verdict), "verdict_code": c.verdict.code, "verdict_95_alone": str(c.alone),
            "exact_p_one_sided": None if exact is None else rounded(exact.above),
            "exact_p_deciding": None if c.exact_decision is None or c.exact_decision.adjusted_p is None
            else rounded(c.exact_decision.adjusted_p),
            "exact_verdict": None if c.exact_decision is None else str(c.exact_decision.verdict),
            "text_low": None if c.text is None else rounded(c.text.low),
            "text_high": None if c.text is None else rounded(c.text.high),
            "text_wider": None if c.text is None else rounded(c.text.wider),
            "seeds_to_decide": c.needed,
            "registered_row": registered,
            "grid": {f"{edge:g}": str(v) for edge, v in c.grid}}


def _pass_record(finding: Finding) -> dict[str, object]:
    judged = sum(c.measured for c in finding.comparisons)
    return {"verdict": str(finding.verdict), "verdict_code": finding.verdict.code,
            "rows_judged": judged, "rows_waiting": len(finding.waiting), "complete": not finding.waiting,
            "comparisons": [_comparison_record(c, finding.registered.registers_row(c.models))
                            for c in finding.comparisons],
            "waiting": {label: why for label, why in finding.waiting},
            "sensitivity": {name: {f"{edge:g}": str(v) for edge, v in grid} for name, grid in finding.sensitivity.items()},
            **finding.judged.record}


def _registration_record(registration: Registration) -> dict[str, object]:
    return {"file": registration.path.name, "sha256": registration.sha256, "commit": registration.sealed_by,
            "date": registration.date}


def findings_record(passes: list[Pass], registered: list[Registration]) -> dict[str, object]:
    """reports/study/findings.json: the first registration (and each later one), then per claim its
    form, rules and, per pass that judges it, its verdict and every comparison's figures; where a
    later registration judged a claim again, what the study concludes of it."""
    record: dict[str, object] = {"registration": _registration_record(registered[0]),
                                 **{r.name.replace(" ", "_"): _registration_record(r) for r in registered[1:]}}
    for first in passes[0].findings:
        claim = first.registered
        ends = conclusion(first.number, passes)
        record[f"claim_{first.number}"] = {
            "claim": claim.text, "form": claim.form,
            "rules": {name: r.figure + " " + ("above" if r.kind == "above" else "within ±") + f" {r.edge:g} {r.unit}"
                      for name, r in claim.rules.items()},
            **{p.key: _pass_record(p.finding(first.number)) for p in passes if p.finding(first.number) is not None},
            **({} if ends is None else {"conclusion": {
                "verdict": str(ends.verdict), "verdict_code": ends.verdict.code,
                "rows": [{"comparison": label, "verdict": str(v), "decided_by": name} for label, v, name in ends.rows],
                "waiting": list(ends.waiting)}})}
    return record
