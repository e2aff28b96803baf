"""The study's `report`: from the run folders alone, byte for byte in a fresh clone, refusing a
damaged folder in one line, and leaving every earlier output when it fails part-way."""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

from rnnlm.errors import RnnlmError
from rnnlm_study.campaign import collect as study_collect
from rnnlm_study.judging import report as study_report
from rnnlm_study.folders import StudyFolderError, folder_seed, load_run, seed_folder_name
from tests.conftest import REPO_ROOT, shallow_clone
from tests.study.study_repo import experiment, git, new_repo, study_params


@pytest.fixture
def repo(tmp_path) -> Path:
    return new_repo(tmp_path)


def _folders(repo: Path) -> Path:
    experiment(repo, "beta-run", "beta", 1.0, 2.20, "2026-01-02T11:00:00+00:00")
    experiment(repo, "beta-seed1", "beta", 1.0, 2.26, "2026-01-02T12:00:00+00:00", seed=1)
    experiment(repo, "quick-gamma", "gamma", 0.01, 3.90, "2026-01-03T10:00:00+00:00")
    study_collect.collect(repo, repo / "reports/study")
    return study_params(repo)


OUTPUTS = ("study.md", "study.png", "study/runs.csv", "study/summary.csv", "study/summary.json", "study/findings.json")


def test_report_reads_the_folders_and_git(repo):
    params = _folders(repo)
    reports = repo / "reports"
    runs = study_report.report(reports / "study", reports / "study.md", reports / "study.png", str(params))
    assert sorted((r.model, r.seed, r.quick) for r in runs) == [
        ("alpha", 1337, False), ("beta", 1, False), ("beta", 1337, False), ("gamma", 1337, True)]
    text = (reports / "study.md").read_text()
    full_scale = text.split("## Findings")[0].splitlines()  # the per-model table
    rows = {line.split(" | ")[0]: line for line in full_scale if line.startswith("| [") or line.startswith("| gamma")}
    assert "**2.500**" in rows["| [alpha](study/alpha/seed-1337/generations.md)"] and "cpu: Test CPU" in text
    beta = rows["| [beta](study/beta/seed-1337/generations.md)"]  # two seeds: mean ± half-width, n = 2
    assert "| 2 |" in beta and f"**2.230 ± {12.706 * 0.03:.3f}**" in beta
    assert "Not trained at full scale yet (no study run): gamma." in text  # said in words, not a row of dashes
    assert "| gamma |" not in text.split("## Findings")[0]
    assert "## Quick runs" in text and "[gamma](study/quick/gamma/generations.md)" in text
    assert "## Findings" in text and "### 6." in text and "## Every run" in text
    assert (reports / "study.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = pd.read_csv(reports / "study/runs.csv")
    assert list(zip(table["model"], table["seed"])) == [("alpha", 1337), ("beta", 1337), ("beta", 1)]  # pinned first
    summary = pd.read_csv(reports / "study/summary.csv").set_index(["model", "figure"])
    assert summary.loc[("beta", "stateful_bpc"), "n"] == 2 and summary.loc[("beta", "stateful_bpc"), "mean"] == 2.23
    assert json.loads((reports / "study/summary.json").read_text())["beta"]["seeds"] == 2
    first = {name: (reports / name).read_bytes() for name in OUTPUTS}
    study_report.report(reports / "study", reports / "study.md", reports / "study.png", str(params))
    assert {name: (reports / name).read_bytes() for name in OUTPUTS} == first
    shutil.rmtree(repo / ".git")  # what is registered, and when, is git's to say: without it, nothing is written
    with pytest.raises(RnnlmError, match=r"reports/study: not inside a git repository; expected a clone"):
        study_report.report(reports / "study", reports / "study.md", reports / "study.png", str(params))
    assert {name: (reports / name).read_bytes() for name in OUTPUTS} == first


def test_report_refuses_an_empty_study_and_an_incomplete_folder(tmp_path):
    with pytest.raises(RnnlmError, match="no study folders; run `python -m rnnlm_study collect` first"):
        study_report.report(tmp_path, tmp_path / "s.md", tmp_path / "s.png", str(REPO_ROOT / "params.yaml"))
    (tmp_path / "alpha").mkdir()
    with pytest.raises(RnnlmError, match="alpha: no seed-<seed> folder"):
        study_report.report(tmp_path, tmp_path / "s.md", tmp_path / "s.png", str(REPO_ROOT / "params.yaml"))
    (tmp_path / "alpha/seed-01").mkdir()
    with pytest.raises(RnnlmError, match=r"alpha/seed-01: not a seed folder; expected seed-<seed>"):
        study_report.report(tmp_path, tmp_path / "s.md", tmp_path / "s.png", str(REPO_ROOT / "params.yaml"))
    (tmp_path / "alpha/seed-01").rename(tmp_path / "alpha/seed-1")
    with pytest.raises(RnnlmError, match=r"seed-1/params.yaml: missing; expected a folder written by"):
        study_report.report(tmp_path, tmp_path / "s.md", tmp_path / "s.png", str(REPO_ROOT / "params.yaml"))
    assert not (tmp_path / "s.md").exists()


def test_a_seed_folder_is_read_back_only_under_the_name_collect_writes():
    assert [folder_seed(Path("study/alpha") / seed_folder_name(seed)) for seed in (0, 7, 1337)] == [0, 7, 1337]
    assert [folder_seed(Path("study/alpha") / name) for name in ("seed-07", "seed-x", "seed-", "quick", "7")] == \
        [None] * 5


@pytest.mark.skipif(shallow_clone(), reason="needs the repository's whole git history (the registration's commit)")
def test_a_fresh_clone_rebuilds_the_committed_study_byte_for_byte(tmp_path):
    """What `python -m rnnlm_study report` gives in a fresh clone: the committed study.md, study.png,
    runs.csv, summary.csv, summary.json and findings.json, from the folders alone."""
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", "--shared", str(REPO_ROOT), str(clone))  # the history; the study as it is here
    reports = clone / "reports"
    shutil.rmtree(reports / "study")
    shutil.copytree(REPO_ROOT / "reports/study", reports / "study",
                    ignore=shutil.ignore_patterns("runs.csv", "summary.csv", "summary.json"))
    readme = (clone / "README.md").read_bytes()
    study_report.report(reports / "study", reports / "study.md", reports / "study.png", str(REPO_ROOT / "params.yaml"))
    for name in OUTPUTS:
        assert (reports / name).read_bytes() == (REPO_ROOT / "reports" / name).read_bytes(), name
    assert (clone / "README.md").read_bytes() == readme  # the README links to the study; no report writes it
    assert "(reports/study.md)" in readme.decode()


def _edit_json(path: Path, **changes) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def test_report_refuses_a_full_scale_run_among_the_quick_ones(repo, study_cli):
    out = repo / "reports/study"
    study_collect.collect(repo, out)
    shutil.copytree(out / "alpha/seed-1337", out / "quick/alpha")
    done = study_cli(repo, "report", "--params", str(REPO_ROOT / "params.yaml"))
    assert done.returncode == 1 and done.stderr.startswith(
        "error: reports/study/quick/alpha/params.yaml: has train.steps_scale 1: a full-scale run in a quick folder")


@pytest.mark.parametrize("damage, message", [
    (lambda f: (f / "epochs.tsv").write_text((f / "epochs.tsv").read_text().splitlines()[0] + "\n10\t1\t2.0\t1.69\t1\n"),
     "epochs.tsv: holds epochs 1, but train_metrics.json says 2 epochs; expected the files of one run"),
    (lambda f: (f / "metrics.json").write_text('{"model": "alpha", "stateful_bpc": 2.'),
     "metrics.json: does not parse"),
    (lambda f: (f / "params.yaml").write_text(""), "params.yaml: does not parse (empty or not a table)"),
    (lambda f: (f / "params.yaml").write_text((f / "params.yaml").read_text().replace("seed: 1337", "seed: 3")),
     "params.yaml: has seed 3, not the folder's 1337"),
    (lambda f: (f / "train_metrics.json").unlink(), "train_metrics.json: missing"),
    (lambda f: _edit_json(f / "metrics.json", stateful_bpc=float("nan")),
     "metrics.json: has nan under stateful_bpc, expected a finite number in (0, 100]"),
    (lambda f: _edit_json(f / "metrics.json", stateless_bpc=-3.7),
     "metrics.json: has -3.7 under stateless_bpc, expected a finite number in (0, 100]"),
    (lambda f: _edit_json(f / "metrics.json", reset_curve_bpc={"1": float("inf"), "never": 2.5}),
     "metrics.json: has inf under reset_curve_bpc[1], expected a finite number in (0, 100]"),
    (lambda f: _edit_json(f / "metrics.json", context_horizon=float("nan")),
     "metrics.json: has nan under context_horizon"),
    (lambda f: _edit_json(f / "metrics.json", text={"stateless": {"known_word_share": 1.4}}),
     "metrics.json: has 1.4 under text.stateless.known_word_share, expected a finite number in (-1e-12, 1]"),
    (lambda f: (f / "epochs.tsv").write_text((f / "epochs.tsv").read_text().replace("\t1.69\t1.72", "\t-1.69\t1.72")),
     "epochs.tsv: has -1.69 under epoch 1 val_loss"),
    (lambda f: _edit_json(f / "train_metrics.json", best_val_loss=1.5),
     "epochs.tsv: has its lowest validation loss at 1.69, but train_metrics.json says 1.5"),
    (lambda f: _edit_json(f / "metrics.json", tokens="sentencepiece"),
     "params.yaml: says tokens 'char', but metrics.json measured a 'sentencepiece' model"),
    (lambda f: (f / "generations.md").unlink(), "generations.md: missing; expected the samples the study links to"),
    (lambda f: (f / "params.yaml").write_text((f / "params.yaml").read_text().replace("cell: gru", "layers_x: 1")),
     "params.yaml: models.alpha.layers_x: unknown key"),
    (lambda f: _edit_json(f / "metrics.json", val_tokens=-111539),
     "metrics.json: has -111539 under val_tokens, expected a finite whole number in (0, 1e+15]"),
    (lambda f: _edit_json(f / "metrics.json", stateful_bpc=1e300),
     "metrics.json: has 1e+300 under stateful_bpc, expected a finite number in (0, 100]"),
    (lambda f: (f / "params.yaml").write_text((f / "params.yaml").read_text().replace("lr: 0.003", "lr: .nan")),
     "params.yaml: models.alpha.lr: expected a finite positive number, got nan"),
    (lambda f: (f / "params.yaml").write_text((f / "params.yaml").read_text().replace("seed: 1337\n",
                                                                                      "seed: 1337\nseed: 1337\n")),
     "params.yaml: does not parse (key 'seed' appears twice"),
    (lambda f: _edit_json(f / "metrics.json", val_chars="many"),
     "metrics.json: has 'many' under val_chars, expected a finite whole number"),
    (lambda f: (f / "params.yaml").write_text((f / "params.yaml").read_text().replace("batch_size: 64",
                                                                                      "batch_size: sixty")),
     "params.yaml: train.batch_size: expected a positive integer, got 'sixty'"),
    (lambda f: _edit_json(f / "metrics.json", text=[1, 2]), "metrics.json: has [1, 2] under text, expected a mapping"),
    (lambda f: _edit_json(f / "metrics.json", reset_curve_bpc=[3.7, 2.5]),
     "metrics.json: has [3.7, 2.5] under reset_curve_bpc, expected a mapping"),
    (lambda f: _edit_json(f / "metrics.json", first_epoch="early"),
     "metrics.json: has 'early' under first_epoch, expected a mapping"),
    (lambda f: _edit_json(f / "metrics.json", context_curve_bpc={"eight": 2.4}),
     "metrics.json: has the key 'eight' in context_curve_bpc, expected a whole number of tokens"),
    (lambda f: _edit_json(f / "provenance.json", machines="one"),
     "provenance.json: has 'one' under machines, expected a list of machines, each a mapping"),
    (lambda f: _edit_json(f / "provenance.json", date="yesterday"),
     "provenance.json: has 'yesterday' under date, expected an ISO 8601 date"),
    (lambda f: (f / "params.yaml").write_text("- 1\n- 2\n"), "params.yaml: holds a list, not a mapping of fields"),
    (lambda f: (f / "metrics.json").write_text("[1, 2]"), "metrics.json: holds a list, not a mapping of fields"),
], ids=["epochs disagree", "metrics cut short", "empty params", "another seed", "file missing", "nan", "negative",
        "inf in a curve", "nan horizon", "share above 1", "negative loss", "best disagrees", "other tokens",
        "no samples", "no cell", "negative count", "1e300 bits", "nan lr", "a key twice", "a count as text",
        "batch size as text", "text a list", "reset curve a list", "first epoch as text", "a curve key as text",
        "machines as text", "a date that is no date", "params a list", "metrics a list"])
def test_report_refuses_a_damaged_run_in_one_line_naming_the_file(repo, damage, message, study_cli):
    out = repo / "reports/study"
    study_collect.collect(repo, out)
    damage(out / "alpha/seed-1337")
    done = study_cli(repo, "report", "--params", str(REPO_ROOT / "params.yaml"))
    assert done.returncode == 1 and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith(f"error: reports/study/alpha/seed-1337/{message}")
    assert not (repo / "reports/study.md").exists()


def _blocks_edit(edit):
    """A damage that rewrites validation_blocks.csv: `edit` takes and returns its rows (header first)."""
    def damage(folder):
        rows = [line.split(",") for line in (folder / "validation_blocks.csv").read_text().splitlines()]
        (folder / "validation_blocks.csv").write_text("\n".join(",".join(r) for r in edit(rows)) + "\n")
    return damage


def _double_stateful(rows):
    column = rows[0].index("stateful_nats")
    return [rows[0]] + [[*r[:column], repr(2 * float(r[column])), *r[column + 1:]] for r in rows[1:]]


@pytest.mark.parametrize("damage, message", [
    (_blocks_edit(lambda rows: [[c for c in r if c != r[rows[0].index("bigram_nats")]] for r in rows]),
     "validation_blocks.csv: has no bigram_nats column, expected one for each scorer metrics.json reports"),
    (_blocks_edit(lambda rows: [rows[0]] + [[r[0], r[1], "0", *r[3:]] for r in rows[1:]]),
     "validation_blocks.csv: has a block of 0 characters, expected every block to hold some"),
    (_blocks_edit(lambda rows: rows[:-1]),
     "validation_blocks.csv: has 1 blocks, expected the 2 blocks of 2,048 characters, in order, of a split of 3,047"),
    (_blocks_edit(lambda rows: rows + [["2", "4096", *rows[-1][2:]]]),
     "validation_blocks.csv: has 3 blocks, expected the 2 blocks"),
    (_blocks_edit(lambda rows: rows[:2] + [[rows[2][0], rows[2][1], "999", *rows[2][3:]]]),
     "validation_blocks.csv: adds up to 3,046 characters and 3,047 tokens, expected metrics.json's 3,047 and 3,047"),
    (_blocks_edit(_double_stateful), "validation_blocks.csv: sums to 5.000000 stateful bits per character, expected "
                                     "metrics.json's 2.5"),
    (lambda f: _edit_json(f / "provenance.json", registration="yes"),
     "provenance.json: has 'yes' under registration, expected a mapping of the registration's file"),
    (lambda f: _edit_json(f / "provenance.json", files=5), "provenance.json: has 5 under files, expected a list"),
], ids=["a column missing", "empty blocks", "a block cut", "a block added", "a count off", "nats doubled",
        "registration as text", "files a number"])
def test_a_folder_whose_blocks_or_provenance_do_not_fit_the_run_is_refused(repo, damage, message):
    """The text interval resamples the blocks: they must be the run's own split, adding up to its
    totals, or the interval moves silently (it did: [0.94, 0.98] to [0.94, 1.55])."""
    out = repo / "reports/study"
    study_collect.collect(repo, out)
    folder = out / "alpha/seed-1337"
    damage(folder)
    with pytest.raises(StudyFolderError) as error:
        load_run(folder, "alpha", 1337, quick=False)
    assert str(error.value).startswith(f"{folder}/{message}") and "\n" not in str(error.value)


def test_report_failing_part_way_leaves_every_previous_output(repo, monkeypatch):
    params = _folders(repo)
    reports = repo / "reports"
    study_report.report(reports / "study", reports / "study.md", reports / "study.png", str(params))
    before = {p: p.read_bytes() for p in (reports / name for name in OUTPUTS)}
    shutil.rmtree(reports / "study/beta/seed-1")  # the study changes: every output would change with it
    import matplotlib.figure

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", full)  # study.md is written before the figure
    with pytest.raises(RnnlmError, match=r"cannot write .*study.png: No space left on device"):
        study_report.report(reports / "study", reports / "study.md", reports / "study.png", str(params))
    assert {p: p.read_bytes() for p in before} == before  # study.md, the figure and the summaries still agree
    assert not [p for p in repo.rglob(".*.tmp")]
    monkeypatch.undo()
    study_report.report(reports / "study", reports / "study.md", reports / "study.png", str(params))
    assert (reports / "study.md").read_bytes() != before[reports / "study.md"]


def test_a_params_entry_that_cannot_be_the_trained_model_is_refused(tmp_path):
    """A run folder's params.yaml edited by hand (its GRU called an LSTM) would change runs.csv and
    the claims that pick models by cell: the entry must be able to have the parameters the training
    counted."""
    from rnnlm_study.folders import StudyFolderError, load_run

    folder = tmp_path / "astra_alpha/seed-1"
    shutil.copytree(REPO_ROOT / "reports/study/astra_alpha/seed-1", folder)
    assert load_run(folder, "astra_alpha", 1, quick=False).cell == "gru"
    params = folder / "params.yaml"
    params.write_text(params.read_text().replace("cell: gru", "cell: lstm", 1))
    with pytest.raises(StudyFolderError, match="params.yaml: describes models.astra_alpha as lstm 64/128/1, which "
                                               "cannot have the 86,913 parameters train_metrics.json counted"):
        load_run(folder, "astra_alpha", 1, quick=False)


def test_a_metric_renamed_since_a_folder_was_collected_is_read_under_its_name_of_today(tmp_path):
    """The committed folders keep the names their runs wrote (context_carried_bpc, before the
    stateful level of the context curve got its name); reading one gives today's name, in place,
    and the figure's context panel reads it."""
    from rnnlm_study.folders import RENAMED_METRICS, load_run
    from rnnlm_study.judging.figure import _context_excess

    folder = tmp_path / "astra_alpha/seed-1"
    shutil.copytree(REPO_ROOT / "reports/study/astra_alpha/seed-1", folder)
    written = json.loads((folder / "metrics.json").read_text())
    assert "context_carried_bpc" in written and "context_stateful_bpc" not in written
    run = load_run(folder, "astra_alpha", 1, quick=False)
    assert list(run.metrics) == [RENAMED_METRICS.get(key, key) for key in written]
    assert run.metrics["context_stateful_bpc"] == written["context_carried_bpc"]
    excess = _context_excess(run)
    assert len(excess) == len(written["context_curve_bpc"]) and excess["1"] > 0


def test_the_figure_draws_a_carried_model_dashed_in_its_twins_colour():
    """Eleven models (the study's nine, two carried twins) on ten colours would give the eleventh the
    first one's: each reset model keeps a colour of its own, a carried one takes its twin's, dashed."""
    from types import SimpleNamespace

    from rnnlm_study.judging.figure import _styles

    def run(size: int, training: str = "reset"):
        return [SimpleNamespace(shape=("gru", size, size, 1), tokens="char", training=training)]

    by_model = {f"m{i}": run(i) for i in range(10)}
    by_model |= {"m0_carried": run(0, "carried"), "m1_carried": run(1, "carried"), "lone_carried": run(99, "carried")}
    styles = _styles(by_model, [f"c{i}" for i in range(20)])
    assert len({styles[f"m{i}"]["color"] for i in range(10)}) == 10
    assert styles["m0_carried"] == {"color": styles["m0"]["color"], "linestyle": "--"}
    assert styles["m1_carried"]["color"] == styles["m1"]["color"] and styles["m1"]["linestyle"] == "-"
    assert styles["lone_carried"]["color"] not in {s["color"] for m, s in styles.items() if m != "lone_carried"}
