"""The registered rules: committed once, never edited, and the confirmatory runs trained on code that
descends from the commit that registered them."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from rnnlm_study.registration import RegistrationError, load_registration
from rnnlm_study.registration_git import (current_registration, descends_from, registering_commit, seal,
                                          write_registration)
from tests.conftest import REPO_ROOT, run, shallow_clone

STUDY = REPO_ROOT / "reports/study"


def _git(repo: Path, *args: str) -> str:
    return run(["git", *args], repo).stdout.strip()


def _commit(repo: Path, message: str) -> str:
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", message)
    return _git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path) -> Path:
    root = tmp_path / "repo"
    (root / "reports/study").mkdir(parents=True)
    _git(root, "init", "-q")
    _git(root, "config", "user.email", "t@example.com")
    _git(root, "config", "user.name", "t")
    (root / "README.md").write_text("study\n")
    _commit(root, "older code")
    return root


def _registered(repo: Path) -> Path:
    path = repo / "reports/study/registration-1.yaml"
    shutil.copy((STUDY / "registration-1.yaml"), path)
    return path


def test_the_commit_that_added_the_registration_is_found_and_runs_after_it_descend(repo):
    older = _git(repo, "rev-parse", "HEAD")
    path = _registered(repo)
    registered = _commit(repo, "register the rules")
    (repo / "code.py").write_text("x = 1\n")
    newer = _commit(repo, "code after the registration")
    assert registering_commit(repo, path) == registered
    assert descends_from(repo, newer, registered) and descends_from(repo, registered, registered)
    assert not descends_from(repo, older, registered)  # a run trained on older code is not confirmatory
    assert not descends_from(repo, "0" * 40, registered)


def test_a_registration_edited_after_it_was_registered_is_refused(repo):
    path = _registered(repo)
    registered = _commit(repo, "register the rules")
    path.write_text(path.read_text().replace("edge: 0.05", "edge: 0.04", 1))
    with pytest.raises(RegistrationError, match="differs from the registered file of"):
        registering_commit(repo, path)
    _commit(repo, "move a margin")
    with pytest.raises(RegistrationError, match=f"changed after the commit that registered it \\({registered[:7]}, then"):
        registering_commit(repo, path)


def test_an_uncommitted_registration_counts_from_nothing(repo):
    path = _registered(repo)
    with pytest.raises(RegistrationError, match="not committed"):
        registering_commit(repo, path)


def test_writing_a_registration_reads_its_history_from_git_and_never_overwrites(repo, tmp_path):
    (repo / "reports/study/astra_alpha/seed-1").mkdir(parents=True)
    (repo / "reports/study/astra_alpha/seed-1/metrics.json").write_text("{}")
    data = _commit(repo, "a run")
    draft = tmp_path / "draft.yaml"
    text = (STUDY / "registration-1.yaml").read_text()
    draft.write_text(text[:text.index("\n# Read from git")] + "\n")
    raw = draft.read_text().replace("data_models: [astra_alpha_carried, astra_beta_carried]", "data_models: [astra_alpha]")
    draft.write_text(raw.replace("rule_commits: [54b5d35]", "rule_commits: [1234567]"))
    out = repo / "reports/study/registration-2.yaml"
    with pytest.raises(RegistrationError, match=r"claims.7.rule_commits: 1234567 is read as a number; expected each "
                                                r"commit as text, quoted where it is all digits \('1234567'\)"):
        write_registration(draft, out, repo)  # a hash's prefix of decimal digits only: 1 in 27 at 7 digits
    assert not out.exists()
    draft.write_text(raw.replace("rule_commits: [54b5d35]", f"rule_commits: ['{data[:7]}']"))
    with pytest.raises(RegistrationError, match="commit 4143d4d: not in this repository"):
        write_registration(draft, out, repo)
    for claim in range(1, 7):  # rules set in commits this small repository lacks
        raw = draft.read_text()
        start = raw.index(f"\n  {claim}:\n")
        line = raw.index("rule_commits:", start)
        draft.write_text(raw[:line] + "rule_commits: []" + raw[raw.index("\n", line):])
    written = write_registration(draft, out, repo)
    assert written.claim(7).history == {"rule_set": [{"commit": data[:12], "date": _git(repo, "show", "-s", "--format=%cI")}],
                                        "data_first_committed": {"commit": data[:12],
                                                                 "date": _git(repo, "show", "-s", "--format=%cI")}}
    assert written.claim(1).history["data_first_committed"]["commit"] == data[:12]
    assert written.claim(5).history["data_first_committed"] is None  # no leviathan run here
    with pytest.raises(RegistrationError, match="exists; a registration is never rewritten"):
        write_registration(draft, out, repo)


@pytest.mark.parametrize("edit, why", [
    (lambda raw: raw.pop("confirmatory"), "confirmatory is nothing; expected a mapping"),
    (lambda raw: raw["claims"][2].update(form="some"), "claims.2: form 'some'; expected one of all, any, list"),
    (lambda raw: raw["claims"][1]["rules"]["not_below_bigram"].update(kind="below"), "kind 'below'; expected above"),
    (lambda raw: raw["claims"][2]["rules"]["gap_growth"].update(edge="one"),
     "claims.2.rules.gap_growth: edge is 'one'; expected a number"),
    (lambda raw: raw["claims"][2]["rules"]["gap_growth"].update(grid=[0.0, "five"]),
     r"claims.2.rules.gap_growth.grid: \[0.0, 'five'\]; expected a non-empty list of finite numbers"),
    (lambda raw: raw.update(level="zero"), "level is 'zero'; expected a number"),
    (lambda raw: raw.update(level=1.5), r"level 1.5; expected a family-wise error level in \(0, 1\)"),
    (lambda raw: raw["confirmatory"].update(at_least="five"), "confirmatory: at_least is 'five'; expected a whole"),
    (lambda raw: raw.update(history=[1, 2]), r"history is \[1, 2\]; expected a mapping of claim numbers"),
    (lambda raw: raw["history"][3].update(rule_set="today"), r"history.3.rule_set: 'today'; expected a list"),
    (lambda raw: raw.update(claims={"one": raw["claims"][1]}), "claims.one: expected claims numbered 1, 2"),
    (lambda raw: raw.update(registration="first"), "registration is 'first'; expected a whole number"),
], ids=["no confirmatory seeds", "an unknown form", "an unknown rule", "an edge in words", "a grid in words",
        "a level in words", "a level above 1", "at_least in words", "history a list", "a rule_set in words",
        "a claim named in words", "its number in words"])
def test_a_malformed_registration_is_one_line(tmp_path, edit, why):
    with pytest.raises(RegistrationError, match=why):
        load_registration(_edited(tmp_path, edit))


def _edited(tmp_path: Path, edit) -> Path:
    """The study's registration with `edit` applied to its fields, written to a file of its own."""
    import yaml

    raw = yaml.safe_load((STUDY / "registration-1.yaml").read_text())
    edit(raw)
    path = tmp_path / "registration-9.yaml"
    path.write_text(yaml.safe_dump(raw, allow_unicode=True))
    return path


@pytest.mark.skipif(shallow_clone(), reason="needs the repository's whole git history")
def test_this_repositorys_registration_is_sealed_and_its_confirmatory_runs_descend_from_it():
    """sealed.tsv names the commit that added the registration (whose bytes are unchanged since),
    and what each run folder's provenance says of its code, collect read from git: a test holds both
    to git, so that the report can read the folders alone."""
    registration = current_registration(STUDY)
    assert registration.sealed_by == registering_commit(REPO_ROOT, registration.path)
    for path in STUDY.glob("*/seed-*/provenance.json"):
        provenance = json.loads(path.read_text())
        record = provenance.get("registration")
        if int(path.parent.name.removeprefix("seed-")) in registration.seeds:
            assert record and record["commit"] == registration.sealed_by, path
            assert record["code_descends"] is True, f"{path}: trained on {provenance['commit'][:7]}, before the rules"
        if record:
            assert record["code_descends"] == descends_from(REPO_ROOT, provenance["commit"], record["commit"]), path


def test_sealing_records_the_registering_commit_once(repo):
    path = _registered(repo)
    with pytest.raises(RegistrationError, match="not committed"):
        seal(repo, path)
    registered = _commit(repo, "register the rules")
    assert seal(repo, path) == registered
    assert current_registration(repo / "reports/study").sealed_by == registered
    with pytest.raises(RegistrationError, match="sealed already"):
        seal(repo, path)
    path.write_text(path.read_text().replace("edge: 0.05", "edge: 0.04", 1))
    with pytest.raises(RegistrationError, match="differs from the registered file of"):
        current_registration(repo / "reports/study")


def test_register_refuses_what_is_no_draft_and_what_lies_outside_in_one_line(repo, tmp_path, in_process):
    draft = tmp_path / "draft.yaml"
    draft.write_text("registration: 2\nlevel: 0.05\n")
    unlisted = tmp_path / "unlisted.yaml"
    unlisted.write_text("registration: 2\nclaims:\n  1: {rule_commits: 54b5d35}\n")
    outside = tmp_path / "registration-1.yaml"
    outside.write_text((STUDY / "registration-1.yaml").read_text())
    for args, message in (
            (["register", str(tmp_path / "none.yaml"), "--out", "reports/study/registration-2.yaml"],
             "none.yaml: cannot be read (No such file or directory); expected a draft"),
            (["register", str(draft), "--out", "reports/study/registration-2.yaml"],
             "draft.yaml: expected a draft with a mapping of claims and no history"),
            (["register", str(unlisted), "--out", "reports/study/registration-2.yaml"],
             "unlisted.yaml: claims.1: expected a mapping whose rule_commits and data_models are lists"),
            (["register", "--seal", str(outside)], "registration-1.yaml: outside the repository")):
        done = in_process(["-m", "rnnlm_study", *args], repo)
        assert done.returncode == 1 and done.stderr.count("\n") == 1 and message in done.stderr, done.stderr
        assert not (repo / "reports/study/registration-2.yaml").exists()


@pytest.mark.parametrize("edit, why", [
    (lambda raw: raw["claims"].pop(5), r"no claim 5; expected claims 1 to 7"),
    (lambda raw: raw["claims"][6]["rules"].update(agreement=raw["claims"][6]["rules"].pop("agrees")),
     r"claims.6.rules has no agrees; expected the rules agrees"),
], ids=["a claim removed", "a rule renamed"])
def test_a_registration_without_a_claim_or_rule_the_judging_reads_stops_the_report(tmp_path, edit, why):
    """Committed and sealed as it is (a new registration), it still cannot judge the study's claims."""
    from rnnlm_study.judging.findings import check_claims

    with pytest.raises(RegistrationError, match=why):
        check_claims(load_registration(_edited(tmp_path, edit)))


def _sealed_study(repo: Path) -> Path:
    """`repo` with registration 1 committed and sealed, then a commit of code after it."""
    path = _registered(repo)
    _commit(repo, "register the rules")
    seal(repo, path)
    _commit(repo, "seal it")
    (repo / "code.py").write_text("x = 1\n")
    _commit(repo, "code after the registration")
    return path


def test_a_shallow_clone_is_told_its_history_is_cut_not_that_the_registration_was_edited(repo, tmp_path):
    _sealed_study(repo)
    clone = tmp_path / "shallow"
    run(["git", "clone", "-q", "--depth", "1", repo.as_uri(), str(clone)], tmp_path)
    with pytest.raises(RegistrationError) as error:
        current_registration(clone / "reports/study")
    message = str(error.value)
    assert "history" in message and "is cut short (a shallow clone)" in message and "`git fetch --unshallow`" in message
    assert "edited" not in message and "\n" not in message
    run(["git", "fetch", "-q", "--unshallow"], clone)
    assert current_registration(clone / "reports/study").number == 1


def test_an_export_inside_another_clone_is_not_advised_to_seal_there(repo, tmp_path):
    """`git archive` unpacked inside another repository (or GIT_DIR set elsewhere): git there holds
    none of its registrations, and sealing there would seal in the wrong repository."""
    _sealed_study(repo)
    outer = tmp_path / "outer"
    outer.mkdir()
    run(["git", "init", "-q"], outer)
    export = outer / "export"
    export.mkdir()
    tar = subprocess.run(["git", "archive", "--format=tar", "HEAD"], cwd=repo, capture_output=True, check=True).stdout
    tarfile.open(fileobj=io.BytesIO(tar)).extractall(export, filter="data")
    with pytest.raises(RegistrationError) as error:
        current_registration(export / "reports/study")
    message = str(error.value)
    assert f"none of its registrations is committed in the git repository it lies in ({outer}" in message
    assert "seal nothing here" in message and "register --seal" not in message


def test_sealing_a_folder_or_a_commit_git_lacks_says_so_in_one_short_line(repo):
    path = _sealed_study(repo)
    for n in range(30):  # a folder of long history: its every commit would have been listed
        (repo / "reports/study/notes.txt").write_text(f"{n}\n")
        _commit(repo, f"note {n}")
    with pytest.raises(RegistrationError, match=r"reports/study: not a registration file; expected one file named "
                                                r"registration-<n>.yaml") as error:
        seal(repo, repo / "reports/study")
    assert not any(commit[:7] in str(error.value) for commit in _git(repo, "log", "--format=%H").split())
    # the commit object that added it lost (a damaged or partial clone)
    added = _git(repo, "log", "--format=%H", "--", "reports/study/registration-1.yaml")
    objects = repo / ".git/objects" / added[:2] / added[2:]
    objects.unlink()
    with pytest.raises(RegistrationError) as error:
        registering_commit(repo, path)
    assert "git cannot read its history in" in str(error.value) and "not committed" not in str(error.value)
