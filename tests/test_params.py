"""params.yaml loads into frozen dataclasses, and every kind of mistake stops with one clear line."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys

import pytest

from rnnlm.models.cells import CELLS
import yaml

from rnnlm.errors import ParamsError
from rnnlm.params import load_params, parse_params
from tests.conftest import REPO_ROOT

STUDY = {  # name: (tokens, cell, embd, hidden, layers, dropout, epochs, lr), as design.md pins them
    "astra_alpha": ("char", "gru", 64, 128, 1, 0.1, 10, 3e-3),
    "astra_beta": ("char", "gru", 128, 256, 2, 0.1, 15, 2e-3),
    "astra_gamma": ("char", "gru", 256, 512, 3, 0.1, 20, 1e-3),
    "scribe_alpha": ("sentencepiece", "gru", 128, 256, 2, 0.1, 10, 2e-3),
    "scribe_beta": ("sentencepiece", "gru", 256, 512, 3, 0.1, 15, 1.5e-3),
    "scribe_gamma": ("sentencepiece", "gru", 384, 768, 4, 0.15, 20, 1e-3),
    "leviathan": ("char", "lstm", 768, 1024, 3, 0.2, 6, 1e-3),
}


def test_repository_params_pin_the_study():
    params = load_params(REPO_ROOT / "params.yaml")
    assert params.model == "astra_alpha"
    for name, (tokens, cell, embd, hidden, layers, dropout, epochs, lr) in STUDY.items():
        m = params.models[name]
        assert (m.tokens, m.cell, m.embd, m.hidden, m.layers, m.dropout, m.epochs, m.lr) == (
            tokens, cell, embd, hidden, layers, dropout, epochs, lr), name
    assert params.models["leviathan"].layer_norm is True
    assert [params.models[n].steps_per_epoch for n in ("astra_alpha", "astra_beta", "astra_gamma")] == [200, 250, 400]
    t = params.train
    assert (t.batch_size, t.seq_len, t.weight_decay, t.grad_clip, t.device) == (64, 128, 0.01, 1.0, "auto")
    assert params.tokenizer.vocab_size == 1000
    assert params.data.train_fraction == 0.9


def test_params_are_frozen(raw_params):
    params = parse_params(raw_params)
    with pytest.raises(dataclasses.FrozenInstanceError):
        params.selected.lr = 1.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        params.models["astra_alpha"] = params.selected  # type: ignore[index]


def test_yaml_1_2_floats_without_a_dot(tmp_path, raw_params):
    text = yaml.safe_dump(raw_params, sort_keys=False).replace("lr: 0.003", "lr: 3e-3", 1)
    (tmp_path / "params.yaml").write_text(text)
    assert load_params(tmp_path / "params.yaml").models["astra_alpha"].lr == 3e-3


@pytest.mark.parametrize("word", ["yes", "no", "on", "off", "Yes", "OFF", "y", "n"])
def test_a_yaml_1_1_boolean_word_is_refused_where_dvc_reads_a_string(tmp_path, raw_params, word):
    """`layer_norm: yes` is True to YAML 1.1 and the string 'yes' to DVC (YAML 1.2): refused, so that
    `dvc params diff` and the run never disagree."""
    from ruamel.yaml import YAML

    text = yaml.safe_dump(raw_params, sort_keys=False)
    text = text.replace("layer_norm: false", f"layer_norm: {word}", 1)
    (tmp_path / "params.yaml").write_text(text)
    assert YAML(typ="safe").load(text)["models"]["astra_alpha"]["layer_norm"] == word  # what DVC reads
    with pytest.raises(ParamsError, match=f"^models.astra_alpha.layer_norm: expected true or false, got '{word}'$"):
        load_params(tmp_path / "params.yaml")
    (tmp_path / "params.yaml").write_text(text.replace(f"layer_norm: {word}", "layer_norm: TRUE", 1))
    assert load_params(tmp_path / "params.yaml").models["astra_alpha"].layer_norm is True


def _set(raw: dict, path: str, value) -> None:
    *parents, last = path.split(".")
    for key in parents:
        raw = raw[key]
    raw[last] = value


def _delete(raw: dict, path: str) -> None:
    *parents, last = path.split(".")
    for key in parents:
        raw = raw[key]
    del raw[last]


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("model", "astra_delta", "model: 'astra_delta' is not under models:; expected one of astra_alpha, astra_beta"),
        ("models.astra_beta.lr", -0.1, "models.astra_beta.lr: expected a finite positive number, got -0.1"),
        ("models.astra_beta.lr", "fast", "models.astra_beta.lr: expected a finite positive number, got 'fast'"),
        ("models.astra_alpha.hidden", 0, "models.astra_alpha.hidden: expected a positive integer, got 0"),
        ("models.astra_alpha.hidden", 12.5, "models.astra_alpha.hidden: expected a positive integer, got 12.5"),
        ("models.astra_alpha.layers", True, "models.astra_alpha.layers: expected a positive integer, got True"),
        ("models.astra_alpha.epochs", -3, "models.astra_alpha.epochs: expected a positive integer, got -3"),
        ("models.astra_alpha.steps_per_epoch", 0, "models.astra_alpha.steps_per_epoch: expected a positive integer, got 0"),
        ("models.astra_alpha.dropout", 1.0, "models.astra_alpha.dropout: expected a number in [0, 1), got 1.0"),
        ("models.astra_alpha.dropout", -0.1, "models.astra_alpha.dropout: expected a number in [0, 1), got -0.1"),
        ("models.astra_alpha.cell", "transformer", "models.astra_alpha.cell: expected one of "
         + ", ".join(repr(name) for name in CELLS) + ", got 'transformer'"),
        ("models.astra_alpha.layer_norm", "yes", "models.astra_alpha.layer_norm: expected true or false, got 'yes'"),
        ("train.seq_len", 1, "train.seq_len: expected an integer of at least 2, got 1"),
        ("train.batch_size", 0, "train.batch_size: expected a positive integer, got 0"),
        ("train.steps_scale", 0, "train.steps_scale: expected a number in (0, 1], got 0.0"),
        ("train.steps_scale", 1e300, "train.steps_scale: expected a number in (0, 1], got 1e+300"),
        ("generate.temperature", float("inf"), "generate.temperature: expected a finite positive number, got inf"),
        ("generate.top_k_temperature", float("nan"), "generate.top_k_temperature: expected a finite positive number, got nan"),
        ("train.device", "tpu", "train.device: expected one of 'auto', 'cpu', 'cuda', got 'tpu'"),
        ("train.weight_decay", -1, "train.weight_decay: expected a finite non-negative number, got -1.0"),
        ("seed", -1, "seed: expected an integer from 0 to 2**64 - 1, got -1"),
        ("seed", 2**64, f"seed: expected an integer from 0 to 2**64 - 1, got {2**64}"),
        ("seed", "2**70", "seed: expected an integer from 0 to 2**64 - 1, got '2**70'"),
        ("data.sha256", "abc", "data.sha256: expected 64 lowercase hex digits, got 'abc'"),
        ("data.train_fraction", 1.0, "data.train_fraction: expected a number strictly between 0 and 1, got 1.0"),
        ("tokenizer.vocab_size", 4, "tokenizer.vocab_size: expected an integer of at least 16, got 4"),
        ("models.astra_alpha.bogus", 3, "models.astra_alpha.bogus: unknown key; expected one of tokens, kind, cell, embd"),
        ("train.lr", 3, "train.lr: unknown key; expected one of batch_size, seq_len"),
        ("extra", 1, "extra: unknown key; expected one of model, seed, data"),
        ("train", [1, 2], "train: expected a mapping of keys, got [1, 2]"),
        ("models", {}, "models: expected a non-empty mapping of model names, got {}"),
    ],
)
def test_invalid_values_name_the_key(raw_params, path, value, message):
    _set(raw_params, path, value)
    with pytest.raises(ParamsError) as caught:
        parse_params(raw_params)
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("models.scribe_beta.lr", "models.scribe_beta.lr: missing; expected a finite positive number"),
        ("train.grad_clip", "train.grad_clip: missing; expected a finite positive number"),
        ("tokenizer", "tokenizer: missing; expected a mapping"),
        ("seed", "seed: missing; expected an integer from 0 to 2**64 - 1"),
    ],
)
def test_missing_keys_name_the_key(raw_params, path, message):
    _delete(raw_params, path)
    with pytest.raises(ParamsError, match="^" + re.escape(message)):
        parse_params(raw_params)


def test_unreadable_files(tmp_path):
    with pytest.raises(ParamsError, match="no such file"):
        load_params(tmp_path / "params.yaml")
    (tmp_path / "params.yaml").write_text("model: [unclosed\n")
    with pytest.raises(ParamsError, match="not valid YAML"):
        load_params(tmp_path / "params.yaml")


@pytest.mark.parametrize("edit, message", [
    (lambda text: text.replace("seed: 1337\n", "seed: 1337\nseed: 7\n", 1), "key 'seed' appears twice"),
    (lambda text: text.replace("    lr: 3.0e-3\n", "    lr: 3.0e-3\n    lr: 1.0e-3\n", 1), "key 'lr' appears twice"),
], ids=["seed twice", "lr twice in an entry"])
def test_a_key_named_twice_is_refused_as_dvc_refuses_it(tmp_path, edit, message):
    """PyYAML keeps the last of two equal keys; DVC's reader refuses the file: so do we, naming both lines."""
    text = (REPO_ROOT / "params.yaml").read_text()
    changed = edit(text)
    assert changed != text
    (tmp_path / "params.yaml").write_text(changed)
    with pytest.raises(ParamsError, match=rf"params.yaml: {message} \(lines \d+ and \d+\); expected each key once"):
        load_params(tmp_path / "params.yaml")


def test_a_merge_key_is_read_as_dvc_reads_it(tmp_path):
    """`<<: *alpha` copies an anchored entry and a key beside it overrides one value: DVC reads such a
    file, and so do we (a key named twice in the entry's own lines is still refused)."""
    text = (REPO_ROOT / "params.yaml").read_text()
    entry = "  astra_wide:\n    <<: *alpha\n    hidden: 256\n"
    merged = text.replace("  astra_alpha:\n", "  astra_alpha: &alpha\n", 1).replace("\nevaluate:\n", entry + "\nevaluate:\n")
    (tmp_path / "params.yaml").write_text(merged)
    params = load_params(tmp_path / "params.yaml")
    wide, alpha = params.models["astra_wide"], params.models["astra_alpha"]
    assert (wide.hidden, alpha.hidden) == (256, 128)
    assert dataclasses.replace(wide, hidden=128) == alpha
    (tmp_path / "params.yaml").write_text(merged.replace(entry, entry + "    hidden: 512\n"))
    with pytest.raises(ParamsError, match=r"key 'hidden' appears twice"):
        load_params(tmp_path / "params.yaml")


def test_a_stage_exits_2_with_one_line(tmp_path, raw_params):
    raw_params["data"]["train_fraction"] = 0
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw_params))
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "stages" / "prepare.py"), "corpus.txt", "out"],
        cwd=tmp_path, capture_output=True, text=True,
    )
    assert done.returncode == 2
    assert done.stderr == "error: data.train_fraction: expected a number strictly between 0 and 1, got 0.0\n"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", ["../evil", "quick", "9lives", "a b"])
def test_a_model_name_is_an_identifier_the_study_does_not_keep(raw_params, name):
    """A name becomes folders and files (reports/study/<name>/, .resume/<name>-<key>.pt): `../evil`
    wrote a resume file outside the resume folder, `quick` collided with the study's quick runs."""
    raw_params["models"][name] = raw_params["models"]["astra_alpha"]
    with pytest.raises(ParamsError, match=f"models.{re.escape(name)}: not a model name; expected letters, digits"):
        parse_params(raw_params)


def test_no_resume_file_is_named_by_a_path(tmp_path):
    from rnnlm.training.resume import ResumeFileError, ResumeStore

    with pytest.raises(ResumeFileError, match="not a model name"):
        ResumeStore(tmp_path / "inner", "../evil", 1, "fingerprint", "cpu", "mkl")


def _changed_lines(before: str, after: str) -> list[tuple[str, str]]:
    assert len(before.splitlines()) == len(after.splitlines()), "lines were added or dropped"
    return [(a, b) for a, b in zip(before.splitlines(), after.splitlines()) if a != b]


def test_a_real_dvc_exp_run_set_changes_one_line_of_params_yaml(tmp_path):
    """The path users take: `dvc exp run -S model=astra_beta` in a repository holding our params.yaml
    rewrites it through DVC's overrides, which replace every list whole (and with it any comment
    that followed it). One line changes, and the experiment's commit holds the same bytes."""
    root = tmp_path / "repo"
    root.mkdir()
    original = (REPO_ROOT / "params.yaml").read_text()
    (root / "params.yaml").write_text(original)
    (root / "dvc.yaml").write_text("stages:\n  selected:\n    cmd: python -c \"import yaml; print(yaml.safe_load("
                                   "open('params.yaml'))['model'])\" > selected.txt\n    params:\n      - model\n"
                                   "    outs:\n      - selected.txt\n")
    for command in (["git", "init", "-q"], ["git", "config", "user.name", "t"],
                    ["git", "config", "user.email", "t@example.invalid"], [sys.executable, "-m", "dvc", "init", "-q"],
                    ["git", "add", "-A"], ["git", "commit", "-qm", "params"]):
        subprocess.run(command, cwd=root, check=True, capture_output=True)
    subprocess.run([sys.executable, "-m", "dvc", "exp", "run", "-S", "model=astra_beta"], cwd=root, check=True,
                   capture_output=True)
    assert (root / "selected.txt").read_text() == "astra_beta\n"
    assert _changed_lines(original, (root / "params.yaml").read_text()) == [("model: astra_alpha", "model: astra_beta")]
    diff = subprocess.run(["git", "diff", "--numstat", "params.yaml"], cwd=root, capture_output=True, text=True)
    assert diff.stdout.split() == ["1", "1", "params.yaml"]


@pytest.mark.parametrize("name", ["params.yaml", "dvc.yaml", "dvc.lock"])
def test_dvc_reads_the_pipelines_yaml_in_c_and_gets_what_the_python_parser_gets(name):
    """requirements.txt installs ruamel.yaml.clib: the loader DVC builds for these files (ruamel's
    `typ="safe"`, `dvc.utils.serialize.parse_yaml`) parses with libyaml, and reads each of them as
    ruamel's own Python parser does."""
    from ruamel.yaml import YAML
    from ruamel.yaml.main import CParser

    assert CParser is not None and YAML(typ="safe").Parser is CParser
    text = (REPO_ROOT / name).read_text(encoding="utf-8")
    assert YAML(typ="safe").load(text) == YAML(typ="safe", pure=True).load(text)


@pytest.mark.parametrize("key, value", [("seed", 4), ("train.steps_scale", 0.01), ("generate.top_k", 20)])
def test_dvcs_overrides_change_one_line_of_params_yaml(tmp_path, key, value):
    """What `-S KEY=VALUE` calls (`dvc.utils.hydra.apply_overrides`), for keys beside lists too; the
    same value set again leaves the bytes as they were."""
    from dvc.utils.hydra import apply_overrides

    original = (REPO_ROOT / "params.yaml").read_text()
    path = tmp_path / "params.yaml"
    path.write_text(original)
    apply_overrides(path, ["model=astra_alpha"])
    assert path.read_text() == original
    apply_overrides(path, [f"{key}={value}"])
    changed = _changed_lines(original, path.read_text())
    assert len(changed) == 1 and changed[0][1].strip() == f"{key.split('.')[-1]}: {value}", changed
