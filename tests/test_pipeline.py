"""The DVC pipeline end to end in a scratch git repository, on a small synthetic corpus."""

from __future__ import annotations

import json
import math
import re

import pytest
import yaml
import torch

from rnnlm.evaluation.blocks import read_blocks
from rnnlm.params import parse_params
from rnnlm.scale import generate_settings
from tests.conftest import copy_repo, make_dvc_repo, run, small_tokenizer, synthetic_play, tiny_models


@pytest.fixture(scope="module")
def data_repo(tmp_path_factory):
    root = make_dvc_repo(tmp_path_factory.mktemp("pipeline") / "repo", synthetic_play(30_000), small_tokenizer)
    run(["dvc", "repro", "tokenizer"], root)
    return root


def test_data_stages_write_their_outputs(data_repo):
    raw = (data_repo / "data/raw/tinyshakespeare.txt").read_text()
    assert raw == synthetic_play(30_000)
    summary = json.loads((data_repo / "data/prepared/vocab.json").read_text())
    assert (summary["train_chars"], summary["val_chars"]) == (27_000, 3_000)
    assert (data_repo / "models/tokenizer/spm.model").stat().st_size > 0


def test_second_repro_does_nothing(data_repo):
    again = run(["dvc", "repro", "tokenizer"], data_repo)
    assert "Running stage" not in again.stdout
    assert "up to date" in again.stdout
    assert "up to date" in run(["dvc", "status", "tokenizer"], data_repo).stdout


def _add_a_cell(root) -> None:
    """What docs/layout.md asks of a new cell: its file (the MGU under another name), its registry
    function and entry, and a params entry that selects it."""
    cells = root / "src/rnnlm/models/cells"
    (cells / "mgu2.py").write_text((cells / "mgu.py").read_text().replace('name="mgu"', 'name="mgu2"'))
    registry = cells / "__init__.py"
    loader = 'def _mgu2() -> CellSpec:\n    from rnnlm.models.cells.mgu2 import SPEC\n    return SPEC\n\n\nCELLS = Registry({\n'
    registry.write_text(registry.read_text().replace("CELLS = Registry({\n", loader + '    "mgu2": _mgu2,\n'))
    assert "mgu2" in registry.read_text()
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["models"]["mgu2_alpha"] = {**params["models"]["mgu_alpha"], "cell": "mgu2"}
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


def _changed_stages(root) -> set[str]:
    """The stages `dvc status` lists (each on a line of its own, ending in a colon)."""
    return {line[:-1] for line in run(["dvc", "status"], root).stdout.splitlines()
            if line.endswith(":") and not line[0].isspace()}


def test_adding_a_cell_and_its_model_leaves_the_data_stages_up_to_date(data_repo):
    """download, prepare and tokenizer neither run nor change (their deps and params are their own)."""
    _add_a_cell(data_repo)
    status = run(["dvc", "status", "download", "prepare", "tokenizer"], data_repo).stdout
    assert "up to date" in status, status
    assert "Stage 'tokenizer' didn't change, skipping" in run(["dvc", "repro", "tokenizer"], data_repo).stdout


def test_mirror_variable_feeds_the_download(tmp_path):
    corpus = synthetic_play(30_000, seed=1)
    root = make_dvc_repo(tmp_path / "repo", corpus, small_tokenizer)
    mirror = tmp_path / "mirror.txt"
    mirror.write_text(corpus)
    (tmp_path / "repo-corpus.txt").unlink()  # data.url now points nowhere: only the mirror can serve
    run(["dvc", "repro", "download"], root, env={"RNNLM_CORPUS_MIRROR": str(mirror)})
    assert (root / "data/raw/tinyshakespeare.txt").read_text() == corpus


def test_bad_params_stop_dvc_repro_with_the_key(tmp_path):
    def broken(params):
        small_tokenizer(params)
        params["data"]["train_fraction"] = 1.5

    root = make_dvc_repo(tmp_path / "repo", synthetic_play(30_000), broken)
    done = run(["dvc", "repro", "prepare"], root, check=False)
    assert done.returncode != 0
    assert "error: data.train_fraction: expected a number strictly between 0 and 1, got 1.5" in done.stderr + done.stdout
    assert not (root / "data/prepared").exists()


def _select(root, name: str) -> None:
    text = (root / "params.yaml").read_text()
    (root / "params.yaml").write_text(re.sub(r"(?m)^model: .*$", f"model: {name}", text))


def _metrics(root) -> dict:
    return json.loads((root / "reports/train/metrics.json").read_text())


@pytest.fixture(scope="module")
def train_repo(tmp_path_factory, finished_run):
    return copy_repo(finished_run, tmp_path_factory.mktemp("train") / "repo")


def test_repro_trains_the_selected_model(train_repo):
    metrics = _metrics(train_repo)
    assert metrics["model"] == "astra_alpha" and metrics["steps"] == 6 and metrics["epochs"] == 2
    assert metrics["device"] == "cpu"
    from rnnlm.compute import backend

    assert metrics["gemm"] == str(backend.gemm_for(torch.device("cpu")))  # the products' libraries are recorded
    steps = (train_repo / "reports/train/steps.tsv").read_text().splitlines()
    assert steps[0].split("\t") == ["step", "epoch", "train_loss", "lr", "tokens_per_second"] and len(steps) == 7
    epochs = (train_repo / "reports/train/epochs.tsv").read_text().splitlines()
    assert epochs[0].split("\t")[:4] == ["step", "epoch", "train_loss", "val_loss"] and len(epochs) == 3
    assert not list((train_repo / ".resume").glob("*.pt"))  # resume files removed on completion
    assert "up to date" in run(["dvc", "status"], train_repo).stdout
    # Bytecode that Python writes beside the library (where PYTHONDONTWRITEBYTECODE is not set: a
    # test run, a stage) is not a change of the folder deps: DVC would otherwise rerun every stage.
    stray = train_repo / "src/rnnlm/data/__pycache__/corpus.cpython-399.pyc"
    stray.parent.mkdir(exist_ok=True)
    stray.write_bytes(b"bytecode")
    try:
        assert "up to date" in run(["dvc", "status"], train_repo).stdout
    finally:
        stray.unlink()


def test_generate_evaluate_and_report(train_repo):
    data = json.loads((train_repo / "reports/generations.json").read_text())
    assert data["model"] == "astra_alpha" and len(data["samples"]) == 3 * 4 * 2
    metrics = json.loads((train_repo / "reports/metrics.json").read_text())
    assert metrics["model"] == "astra_alpha"
    assert list(metrics["reset_curve_bpc"]) == ["1", "2", "4", "8", "16", "32", "64", "128", "256", "512", "1024", "never"]
    assert metrics["stateless_bpc"] == metrics["reset_curve_bpc"]["1"]
    assert metrics["stateful_bpc"] == metrics["reset_curve_bpc"]["never"]
    assert list(metrics["ngram_bpc"]) == ["unigram", "bigram", "trigram", "4gram", "5gram"]
    assert set(metrics["text"]) == {"stateless", "stateful", "validation"}
    assert list(metrics["context_curve_bpc"]) == ["1", "2", "4", "8"] and metrics["context_targets"] == 100
    assert "memory_horizon" not in metrics and "context_horizon" in metrics
    # the weights after epoch 1 (of 2 here) scored both ways: other weights, other scores
    first = metrics["first_epoch"]
    assert set(first) == {"stateful_bpc", "stateless_bpc"} and all(math.isfinite(v) for v in first.values())
    assert first["stateful_bpc"] != metrics["stateful_bpc"] and first["stateless_bpc"] != metrics["stateless_bpc"]
    context = (train_repo / "reports/plots/context_curve.csv").read_text().splitlines()
    assert context[0] == "c,context_c_bpc,stateful_bpc,standard_error_bpc,context_chars" and len(context) == 5
    blocks = read_blocks((train_repo / "reports/validation_blocks.csv").read_text())
    assert sum(blocks.tokens) == metrics["val_tokens"] and sum(blocks.chars) == metrics["val_chars"]
    assert set(blocks.nats) == {"stateful", "stateless", "bigram", "first_epoch_stateful", "first_epoch_stateless"}
    nats = metrics["stateful_bpc"] * metrics["val_chars"] * math.log(2)  # the total, summed its own way
    assert math.isclose(sum(blocks.nats["stateful"]), nats, rel_tol=1e-9)
    curve = (train_repo / "reports/plots/reset_curve.csv").read_text().splitlines()
    assert curve[0].startswith("k,reset_every_k_bpc,never_reset_bpc,unigram_bpc,bigram_bpc") and len(curve) == 12
    markdown = (train_repo / "reports/generations.md").read_text()
    assert markdown.startswith("# Generations: astra_alpha") and "## What statefulness is worth" in markdown
    assert markdown.count("<tr><th>stateless</th><th>stateful</th></tr>") == 12
    shown = json.loads(run(["dvc", "metrics", "show", "--json"], train_repo).stdout)
    assert "reports/metrics.json" in json.dumps(shown) and "reports/train/metrics.json" in json.dumps(shown)
    plots = run(["dvc", "plots", "show", "--json"], train_repo).stdout
    assert "reset_curve" in plots and "context_curve" in plots
    assert "up to date" in run(["dvc", "status"], train_repo).stdout


def test_a_cell_without_loops_trains_and_switching_back_restores_from_the_run_cache(train_repo):
    """mgu_alpha (the minimal gated unit, autograd only) trains, samples and is evaluated by `dvc repro`;
    switching back to the default model brings its checkpoint and figures back from the run cache."""
    first = (train_repo / "models/model.pt").read_bytes()
    first_metrics = _metrics(train_repo)
    _select(train_repo, "mgu_alpha")
    assert "Running stage 'train'" in run(["dvc", "repro"], train_repo).stdout
    assert _metrics(train_repo)["model"] == "mgu_alpha" and _metrics(train_repo)["steps"] == 6
    generations = json.loads((train_repo / "reports/generations.json").read_text())
    assert generations["model"] == "mgu_alpha" and {s["mode"] for s in generations["samples"]} == {"stateless", "stateful"}
    metrics = json.loads((train_repo / "reports/metrics.json").read_text())
    assert metrics["model"] == "mgu_alpha" and math.isfinite(metrics["stateful_bpc"]) and "context_horizon" in metrics
    _select(train_repo, "astra_alpha")
    restored = run(["dvc", "repro"], train_repo)
    assert "Stage 'train' is cached - skipping run, checking out outputs" in restored.stdout
    assert (train_repo / "models/model.pt").read_bytes() == first
    assert _metrics(train_repo) == first_metrics


def test_adding_a_cell_leaves_the_models_of_other_cells_as_they_are(train_repo):
    """The model stages depend on the selected cell's fingerprint (`models/cell.json`), not on the
    cells' folder: a new cell reruns only the `cell` stage, which writes the GRU's fingerprint again,
    byte for byte, and train, generate and evaluate are skipped."""
    kept = ("params.yaml", "src/rnnlm/models/cells/__init__.py")
    originals = {path: (train_repo / path).read_text() for path in kept}
    outputs = {path: (train_repo / path).read_bytes() for path in ("models/cell.json", "models/model.pt", "reports/metrics.json")}
    assert _changed_stages(train_repo) == set()
    _add_a_cell(train_repo)
    try:
        assert _changed_stages(train_repo) == {"cell"}
        done = run(["dvc", "repro"], train_repo).stdout
        assert "Running stage 'cell'" in done
        assert [stage for stage in ("train", "generate", "evaluate", "report") if f"Running stage '{stage}'" in done] == []
        assert {path: (train_repo / path).read_bytes() for path in outputs} == outputs
        (train_repo / "src/rnnlm/models/cells/gru.py").write_text(originals.setdefault(
            "src/rnnlm/models/cells/gru.py", (train_repo / "src/rnnlm/models/cells/gru.py").read_text()) + "\n# edited\n")
        assert _changed_stages(train_repo) == {"cell"}  # the check can fail: the GRU's own file is in its fingerprint
        run(["dvc", "repro", "cell"], train_repo)
        assert _changed_stages(train_repo) == {"train", "generate", "evaluate"}
    finally:
        for path, text in originals.items():
            (train_repo / path).write_text(text)
        (train_repo / "src/rnnlm/models/cells/mgu2.py").unlink()
        run(["dvc", "repro", "cell"], train_repo)
    assert _changed_stages(train_repo) == set()


REJECTED = {  # `dvc exp run -S ...` -> the one line the cell stage refuses it with
    "seed=18446744073709551616": "error: seed: expected",
    "train.steps_scale=1e300": "error: train.steps_scale: expected a number in (0, 1], got 1e+300",
    "model=bengio_mlp train.state=carried":
        "error: train.state: 'carried' needs a recurrent model; kind 'mlp' has no state to carry",
    "models.astra_alpha.steps_per_epoch=1000000000000":
        "error: models.astra_alpha: epochs x steps_per_epoch is 2 x 1,000,000,000,000 = 2,000,000,000,000 steps; "
        "expected at most 1,000,000",
    "generate.max_new_tokens=1000000000": "error: generate.max_new_tokens: expected an integer from 1 to 100,000",
    "evaluate.context_targets=1000000": "error: evaluate.context_targets: expected an integer from 1 to 100,000",
    "train.device=cuda": "error: train.device: 'cuda' but PyTorch sees no CUDA GPU here; expected 'auto' or 'cpu'",
    "models.astra_alpha.hidden=200000": "GiB available; expected a smaller model, batch or window",
    "train.batch_size=100000000": "error: models.astra_alpha (embd 8, hidden 12, 1 layer) at train.batch_size "
                                  "100,000,000 and train.seq_len 16: a training step needs at least",
    "train.seq_len=5000": "error: train.seq_len: 5,000 is longer than the validation text can fill once (3,000 "
                          "tokens of astra_alpha's tokenizer at train.steps_scale 1); expected at most 2,999",
}
KEPT = ("models/model.pt", "reports/train/metrics.json", "reports/train/epochs.tsv", "reports/generations.json")


@pytest.mark.parametrize("setting", list(REJECTED))
def test_a_rejected_value_stops_repro_before_the_model_stages_lose_their_outputs(train_repo, setting):
    """The cell stage reads every param the model stages read, checks the whole file as train would
    and asks the machine what train would ask it (`rnnlm.preflight`): a value that cannot be stops
    it, before DVC removes the checkpoint, the training reports and the generations."""
    from dvc.utils.hydra import apply_overrides

    if setting == "train.device=cuda" and torch.cuda.is_available():
        pytest.skip("a GPU is here: cuda is a device that exists")
    params = train_repo / "params.yaml"
    original = params.read_text()
    kept = {path: (train_repo / path).read_bytes() for path in KEPT}
    apply_overrides(params, setting.split())  # what `dvc exp run -S` writes before it runs
    assert params.read_text() != original
    try:
        done = run(["dvc", "repro"], train_repo, check=False)
        assert done.returncode != 0 and REJECTED[setting] in done.stdout + done.stderr, done.stdout + done.stderr
        assert "Running stage 'cell'" in done.stdout and "Running stage 'train'" not in done.stdout
        assert {path: (train_repo / path).read_bytes() for path in kept} == kept
    finally:
        params.write_text(original)
    again = run(["dvc", "repro"], train_repo).stdout  # DVC removed cell.json; it comes back from its cache
    assert "Running stage 'train'" not in again
    assert _changed_stages(train_repo) == set()
    assert {path: (train_repo / path).read_bytes() for path in kept} == kept


@pytest.mark.slow
def test_exp_run_selects_a_model_and_exp_show_lists_it(train_repo):
    run(["git", "add", "-A"], train_repo)  # whatever the tests before left; astra_alpha's run is committed
    run(["git", "commit", "-qm", "back on astra_alpha", "--allow-empty"], train_repo)
    run(["dvc", "exp", "run", "-S", "model=scribe_alpha", "-S", "train.steps_scale=0.5"], train_repo)
    assert _metrics(train_repo)["model"] == "scribe_alpha" and _metrics(train_repo)["steps"] == 4
    sampling = parse_params(yaml.safe_load((train_repo / "params.yaml").read_text())).generate
    full, quick = sampling.max_new_tokens, generate_settings(sampling, 0.5).max_new_tokens
    generations = json.loads((train_repo / "reports/generations.json").read_text())  # a quick run's: shorter
    assert generations["settings"]["max_new_tokens"] == quick < full
    assert {sample["new_tokens"] for sample in generations["samples"]} == {quick}
    shown = json.loads(run(["dvc", "exp", "show", "--json"], train_repo).stdout)
    experiments = [rev["data"] for record in shown for exp in (record.get("experiments") or []) for rev in exp["revs"]]
    assert len(experiments) == 1
    params = experiments[0]["params"]["params.yaml"]["data"]
    metrics = experiments[0]["metrics"]["reports/train/metrics.json"]["data"]
    assert (params["model"], params["train"]["steps_scale"]) == ("scribe_alpha", 0.5)
    assert (metrics["model"], metrics["steps"]) == ("scribe_alpha", 4)
    baseline = next(record for record in shown if record["rev"] != "workspace")["data"]
    assert baseline["metrics"]["reports/train/metrics.json"]["data"]["model"] == "astra_alpha"


def test_stages_import_the_library_of_their_own_checkout(tmp_path):
    """A queued experiment runs a temporary copy of its commit: its stages must not import the
    library that `pip install -e .` points at, but the copy's own src/."""
    root = make_dvc_repo(tmp_path / "repo", synthetic_play(30_000), tiny_models)
    init = root / "src/rnnlm/__init__.py"
    init.write_text(init.read_text() + "\nimport pathlib\npathlib.Path('imported-from-this-checkout').touch()\n")
    run(["dvc", "repro", "download"], root)
    assert (root / "imported-from-this-checkout").exists()
