"""The speed benchmark runs and prints its tables (`--quick`: tiny shapes; no time is asserted)."""

from __future__ import annotations

import importlib
import json
import os
import platform
import re
import subprocess
import tarfile
import time
import sys
from pathlib import Path

import psutil
import pytest
import torch
import yaml

from rnnlm.models.cells import CELLS

from tests.conftest import REPO_ROOT


CHECKOUT = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")}
"""The environment of a benchmark run as a command: this checkout's library, whatever else is installed."""


def _benchmark_module(name: str):
    """The module `benchmarks.NAME` (the file benchmarks/NAME.py)."""
    return importlib.import_module(f"benchmarks.{name}")


def _benchmark(*args: str, timeout: int = 60) -> subprocess.CompletedProcess:
    """`python -m benchmarks.speed --quick ARGS` from the repository root, importing this checkout's library."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")}
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.speed", "--quick", *args],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout,
    )


def test_quick_benchmark_prints_both_tables_and_writes_them(tmp_path):
    models = ["astra_alpha", "leviathan", "rnn_alpha", "scribe_alpha"]
    markdown, figures = tmp_path / "speed.md", tmp_path / "speed.json"
    result = _benchmark("--models", *models, "--markdown", str(markdown), "--json", str(figures), timeout=300)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert markdown.read_text() == out  # the file holds what was printed
    # the limit: the large product through both libraries, each against the faster
    assert re.search(r"MKL [\d.]+ GFLOP/s \(\d+% of the faster\), oneDNN [\d.]+ GFLOP/s", out)
    from rnnlm.compute import backend, cpu

    # the CPU: model name, vendor and generation
    assert cpu.cpu_model() in out and f"({cpu.cpu_vendor()} {cpu.cpu_generation()}, ".replace(" , ", ", ") in out
    data = json.loads(figures.read_text())
    assert data["machine"]["gemm"] == str(backend.gemm_for(torch.device("cpu")))
    assert data["machine"]["avx512"] == cpu.has_avx512()
    assert data["machine"]["cpu_generation"] == cpu.cpu_generation()
    assert set(data["matmul_gflops"]) == {"MKL", "oneDNN"} and data["limit_gflops"] == max(data["matmul_gflops"].values())
    ours = next(r for r in data["training"] if r["model"] == "leviathan" and r["implementation"] == "ours")
    assert set(ours) == {"model", "implementation", "ms_per_step", "tokens_per_second", "x_step_by_step", "x_pytorch",
                         "gflops", "limit_gflops", "share_of_limit", "share_of_products_alone", "peak_mb"}
    # each model's share is of the limit timed in its own rounds, which the report names
    assert ours["share_of_limit"] == pytest.approx(ours["gflops"] / ours["limit_gflops"])
    assert f"leviathan {ours['limit_gflops']:.1f}" in out.split("timed again in each model's rounds: ")[1]
    assert not any(r["implementation"] == "limit" for r in data["training"])  # not a row of the table
    alone = next(r for r in data["training"] if r["model"] == "leviathan" and r["implementation"] == "products alone")
    assert ours["share_of_products_alone"] == pytest.approx(alone["ms_per_step"] / ours["ms_per_step"])
    sampled = next(r for r in data["sampling"] if r["model"] == "leviathan" and r["batch"] == 1)
    assert set(sampled["chars_per_second"]) == {"step-by-step", "ours", "PyTorch", "products alone"}
    assert sampled["ours_share_of_products_alone"] == pytest.approx(
        sampled["chars_per_second"]["ours"] / sampled["chars_per_second"]["products alone"])
    training = [line for line in out.splitlines() if line.startswith("| ")]
    for model in models:
        for implementation in ("step-by-step", "ours"):
            assert any(line.startswith(f"| {model} | {implementation} |") for line in training), (model, implementation)
    assert any(line.startswith("| leviathan | nn.LSTM |") for line in training)
    assert any(line.startswith("| astra_alpha | nn.GRU |") for line in training)
    assert any(line.startswith("| rnn_alpha | nn.RNN |") for line in training)
    # sampling rows: character models only, at both batch sizes
    for model in ("astra_alpha", "leviathan", "rnn_alpha"):
        for batch in (1, 4):
            assert any(line.startswith(f"| {model} | {batch} |") for line in out.splitlines()), (model, batch)
    assert not any(line.startswith("| scribe_alpha | 1 |") for line in out.splitlines())
    # stateless sampling: one row per character model, ours beside an advance for every token
    stateless = {r["model"]: r for r in data["stateless_sampling"]}
    assert set(stateless) == {"astra_alpha", "leviathan", "rnn_alpha"}
    rates = stateless["leviathan"]["chars_per_second"]
    assert set(rates) == {"ours", "an advance a token"}
    assert stateless["leviathan"]["ours_x_every_token"] == pytest.approx(rates["ours"] / rates["an advance a token"])
    assert "## Stateless sampling, one sample" in out


def test_gemm_choices_time_every_value_of_the_variable_beside_the_rules(tmp_path):
    figures = tmp_path / "speed.json"
    result = _benchmark("--models", "astra_alpha", "--only", "training", "--gemm-choices", "--json", str(figures))
    assert result.returncode == 0, result.stderr
    assert "## Our training step under each GEMM choice" in result.stdout
    from rnnlm.compute import backend

    (record,) = json.loads(figures.read_text())["gemm_choices"]
    assert record["model"] == "astra_alpha" and set(record["ms_per_step"]) == {"mkl", "onednn", "mkl:onednn", "onednn:mkl"}
    # what this machine's runs use (a training step has no product of one row)
    assert record["rule"] == str(backend.gemm_for(torch.device("cpu")).without_one_row())
    times = record["ms_per_step"]
    assert record["fastest"] == min(times, key=times.get)
    assert record["rule_share_of_fastest"] == pytest.approx(times[record["fastest"]] / times[record["rule"]])


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the allocator settings are glibc's")
def test_allocator_part_alone_times_both_steps_in_both_modes(tmp_path):
    figures = tmp_path / "speed.json"
    result = _benchmark("--models", "leviathan", "--only", "allocator", "--json", str(figures))
    assert result.returncode == 0, result.stderr
    assert "## Training steps with freed memory given back" in result.stdout and "## Training step (" not in result.stdout
    assert "freed memory kept" in result.stdout.splitlines()[2]  # the header: the whole run keeps it
    data = json.loads(figures.read_text())
    assert data["machine"]["freed_memory_kept"] is True and set(data) >= {"allocator"}
    assert not {"training", "sampling", "gemm_choices"} & set(data)
    (record,) = data["allocator"]
    assert record["model"] == "leviathan" and set(record["ms_per_step"]) == {"ours", "PyTorch"}
    for impl, ms in record["ms_per_step"].items():
        assert record["speedup_kept"][impl] == pytest.approx(ms["default"] / ms["kept"])


def test_a_gemm_choice_applies_to_its_call_alone(gemm):
    gemm_choices = _benchmark_module("gemm_choices")
    from rnnlm.compute import backend

    before = gemm("onednn")
    cpu = torch.device("cpu")
    seen = gemm_choices.under_gemm("mkl:onednn", lambda: (backend.gemm_for(cpu), backend.compiled_for(cpu).gemm()))()
    assert seen == (("mkl", "onednn", "onednn"), "onednn")  # through the library's switch: the compiled code too
    assert backend.gemm_for(torch.device("cpu")) == before  # then put back


@pytest.mark.parametrize("args, message", [
    (["--repeats", "0"], "--repeats 0: expected a positive integer"),
    (["--models", "bengio_mlp"], "--models bengio_mlp: expected a recurrent model")], ids=["repeats", "no recurrence"])
def test_bad_options_are_a_clear_error(args, message, capsys):
    with pytest.raises(SystemExit) as refused:
        _benchmark_module("speed").main(["--quick", *args])
    assert refused.value.code == 2 and message in capsys.readouterr().err


def test_gpu_check_refuses_a_machine_without_a_gpu(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    gpu_check = _benchmark_module("gpu_check")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("text")
    for extra, message in (([], "error: no CUDA GPU here; this command checks a GPU machine (--dry-run tries its "
                                "steps on the CPU)"),
                           (["--dry-run"], "error: --dry-run measures no speed; expected --skip speed with it")):
        with pytest.raises(SystemExit) as refused:
            gpu_check.main(["--corpus", str(corpus), "--out", str(tmp_path / "check.md"), *extra])
        assert refused.value.code == message
        assert not (tmp_path / "check.md").exists()


def test_gpu_check_report_names_the_machine_and_every_figure():
    gpu_check = _benchmark_module("gpu_check")

    row = {"model": "astra_gamma", "implementation": "ours (graph)", "ms_per_step": 21.2, "tokens_per_second": 386126,
           "x_step_by_step": 22.4, "x_cudnn": 0.88, "peak_mb": 0.0}
    report = {
        "environment": {"date": "2026-11-23", "gpu": "NVIDIA H100", "gpu_memory": "80 GB", "driver": "580",
                        "torch": "2.11", "cuda": "13.0", "cudnn": 91900, "python": "3.12", "cpu": "Xeon"},
        "precision": "ieee", "errors": {"pipeline": "RuntimeError: stage generate exited 1"},
        "tests": {"summary": "28 passed", "exit_code": 0, "seconds": 56.0, "failures": []},
        "speed": {"matmul_gflops": 50793.0, "repeats": 5, "rows": [row], "errors": {"leviathan": "OOM"}},
    }
    text = gpu_check.markdown(report)
    for expected in ("NVIDIA H100", "driver 580", "PyTorch 2.11, CUDA 13.0, cuDNN 91900", "28 passed",
                     "| astra_gamma | ours (graph) | 21.20 | 386,126 | 22.40 | 0.88 | 0.0 |", "leviathan failed: `OOM`",
                     "**pipeline failed**"):
        assert expected in text, expected


def test_gpu_check_joins_a_check_split_over_two_calls(tmp_path):
    """Tests and pipeline from one device call, the speed table from another: one report with every
    section, the newer environment, and each part's date and note."""
    gpu_check = _benchmark_module("gpu_check")

    env = {"gpu": "NVIDIA H200", "gpu_memory": "141 GB", "driver": "580", "torch": "2.11", "cuda": "13.0",
           "cudnn": 91900, "python": "3.12", "cpu": "Xeon"}
    first = {"environment": {**env, "date": "2026-11-26T01:17"}, "precision": "ieee", "errors": {},
             "tests": {"summary": "35 passed", "exit_code": 0, "seconds": 30.0, "failures": []}}
    second = {"environment": {**env, "date": "2026-11-26T01:26"}, "precision": "ieee",
              "errors": {"pipeline": "skipped"}, "speed": {"matmul_gflops": 5e4, "repeats": 5, "rows": [], "errors": {}}}
    paths = [tmp_path / "a.json", tmp_path / "b.json"]
    for path, part in zip(paths, (first, second)):
        path.write_text(json.dumps(part))
    report = gpu_check.merge(paths, ["beside five study runs"])
    assert report["tests"] == first["tests"] and report["speed"] == second["speed"]
    assert report["environment"]["date"] == "2026-11-26T01:26" and report["errors"] == {"pipeline": "skipped"}
    assert report["parts"] == [{"date": "2026-11-26T01:17", "sections": ["tests"], "note": "beside five study runs"},
                               {"date": "2026-11-26T01:26", "sections": ["speed"], "note": ""}]
    text = gpu_check.markdown(report)
    assert "- tests: 2026-11-26T01:17; beside five study runs" in text and "- speed: 2026-11-26T01:26" in text


def test_gpu_check_writes_its_report_and_json_whole(tmp_path):
    """`--merge` and a dry run with every part skipped each leave the markdown and its JSON twin
    beside it, and no temporary behind."""
    gpu_check = _benchmark_module("gpu_check")
    environment = {"date": "2026-11-26T01:17", "gpu": "NVIDIA H200", "gpu_memory": "141 GB", "driver": "580",
                   "torch": "2.11", "cuda": "13.0", "cudnn": 91900, "python": "3.12", "cpu": "Xeon"}
    part = {"environment": environment, "precision": "ieee", "errors": {},
            "tests": {"summary": "35 passed", "exit_code": 0, "seconds": 30.0, "failures": []}}
    (tmp_path / "part.json").write_text(json.dumps(part))
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("text")
    for out, extra in ((tmp_path / "merged" / "check.md", ["--merge", str(tmp_path / "part.json")]),
                       (tmp_path / "dry" / "check.md", ["--dry-run", "--skip", "tests", "speed", "pipeline"])):
        gpu_check.main(["--corpus", str(corpus), "--out", str(out), *extra])
        assert sorted(path.name for path in out.parent.iterdir()) == sorted(
            ["check.json", "check.md"] + (["check.log"] if "--dry-run" in extra else []))
        report = json.loads(out.with_suffix(".json").read_text())
        assert out.read_text() == gpu_check.markdown(report) + "\n"
    assert json.loads((tmp_path / "merged" / "check.json").read_text())["tests"] == part["tests"]


def test_gpu_check_environment_describes_the_machine_without_a_gpu():
    """The GPU check's first step runs on any machine: it names the CPU as the benchmark does."""
    gpu_study = _benchmark_module("gpu_study")
    from rnnlm.compute import cpu

    env = gpu_study.environment()
    assert cpu.cpu_model() in env["cpu"] and "freed memory given back" in env["cpu"]
    assert env["torch"] == torch.__version__ and env["python"] == platform.python_version()


def test_gpu_check_runs_the_stages_as_dvc_yaml_writes_them():
    gpu_study = _benchmark_module("gpu_study")
    pipeline_runs = _benchmark_module("pipeline_runs")

    commands = pipeline_runs.stage_commands()
    assert [c[0] for c in commands] == [f"stages/{s}.py" for s in
                                        ("download", "prepare", "tokenizer", "cell", "train", "generate", "evaluate", "report")]
    assert commands[4][1] == "data/prepared" and not any("$" in word for command in commands for word in command)
    written = {word for command in commands for word in command}
    for path in gpu_study.OUTPUTS.values():  # every file it keeps is one a stage writes, or writes into
        assert path in written or str(Path(path).parent) in written, path


@pytest.mark.parametrize("cell", CELLS)
def test_training_products_alone_does_every_product_of_a_step_and_no_other(cell):
    """In float64 every product is a plain ATen one, which the FLOP counter sees: the closure's
    products must add up to three times the forward pass's multiply-adds (forward, input gradients,
    weight gradients), counted here from the model's shapes."""
    training_speed = _benchmark_module("training_speed")
    from torch.utils.flop_counter import FlopCounterMode

    from rnnlm.models.config import ModelConfig

    from rnnlm.models.language_model import RecurrentLM

    config = ModelConfig(cell=cell, vocab_size=11, embd=5, hidden=6, layers=3)
    cell_class = CELLS[cell].layer.cell_class
    gates = cell_class.gates * config.hidden
    batch, steps = 3, 7
    n = batch * steps
    matrix = cell_class.recurrence == "matrix"  # a vector recurrence has no hidden-side product
    forward = (config.vocab_size * config.embd * gates  # the first layer's table
               + matrix * config.layers * n * config.hidden * gates  # hidden side, every layer
               + (config.layers - 1) * n * config.hidden * gates  # input side above the first layer
               + n * config.hidden * config.vocab_size)  # output layer
    run, macs = training_speed.training_products_alone(RecurrentLM(config).double(), batch, steps)
    with FlopCounterMode(display=False) as counter:
        run()
    assert macs == 3 * forward
    assert counter.get_total_flops() == 2 * macs


def test_a_cell_without_references_is_timed_beside_its_products_alone():
    """The benchmarks learn what they need of a cell from its spec: the test's softsign cell, which
    PyTorch has no layer of and the study no step-by-step cell, gets ours, its products alone and
    the limit, with dashes where a reference would be; a cell with loops also its autograd scan."""
    sampling_speed, timing, training_speed = (_benchmark_module(name) for name in
                                              ("sampling_speed", "timing", "training_speed"))

    from rnnlm.models.config import ModelConfig

    config = ModelConfig("softsign_rnn", vocab_size=11, embd=5, hidden=6, layers=2)
    cpu = torch.device("cpu")
    limit = timing.measure_limit(16, 1, cpu)
    rows = training_speed.benchmark_training("softsign", config, timing.QUICK, cpu, limit)
    assert {r.implementation for r in rows} == {"ours", "ours, autograd scan", "products alone", training_speed.LIMIT}
    mgu = training_speed.benchmark_training("mgu", ModelConfig("mgu", vocab_size=11, embd=5, hidden=6, layers=1),
                                            timing.QUICK, cpu, limit)
    assert {r.implementation for r in mgu} == {"ours", "products alone", training_speed.LIMIT}  # autograd is ours
    table = training_speed.training_table(training_speed.training_records(rows, {"softsign": config}))
    assert "| softsign | ours |" in table and "| — | — |" in table
    sampled = sampling_speed.sampling_table(sampling_speed.sampling_records(
        sampling_speed.benchmark_sampling("softsign", config, timing.QUICK, cpu)))
    assert "| softsign | 1 | — |" in sampled


def test_the_gpu_session_script_parses_and_passes_each_benchmark_only_its_options(capsys):
    """The one-call GPU script cannot be run here; it must at least parse, and every option it passes
    to gpu_check.py, stage_times.py and seed_streams.py (a command's continued lines included) must
    be one that script takes."""
    script = REPO_ROOT / "benchmarks/gpu_session.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    commands = re.sub(r"\\\n", " ", script.read_text()).splitlines()  # continued lines joined
    checked = set()
    for name in ("gpu_check", "stage_times", "seed_streams"):
        passed = set(re.findall(r"(--[a-z][a-z-]+)", "\n".join(c for c in commands if f"-m benchmarks.{name} " in c)))
        with pytest.raises(SystemExit):
            _benchmark_module(name).main(["--help"])
        help_text = capsys.readouterr().out
        assert passed and all(option in help_text for option in passed), (name, passed)
        checked |= passed
    assert {"--study", "--full-evaluation", "--models", "--json"} <= checked


def test_the_gpu_session_stops_its_jobs_at_the_deadline_and_keeps_what_it_has(tmp_path):
    """The call that lost a lent session's runs (2026-11-26): at the deadline the script stops each
    background job with the processes it started (their process groups), packs $OUT/gpu.tar.gz and
    ends; a stand-in python3 plays the jobs (a study that outlives the deadline through a child)."""
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "python3").write_text("#!/usr/bin/env bash\n"
                                  'case "$*" in *--study*) sleep 987.654 & wait ;; *) exit 0 ;; esac\n')
    (shim / "python3").chmod(0o755)
    out = tmp_path / "out"  # not made here: a dry run's $OUT may not exist yet
    env = {**os.environ, "PATH": f"{shim}{os.pathsep}{os.environ['PATH']}", "OUT": str(out), "DRY_RUN": "1",
           "ALONE": "", "BESIDE": "pipeline", "RUNS": "astra_alpha:5", "DEADLINE": "4",
           "TMPDIR": str(tmp_path)}
    start = time.monotonic()
    done = subprocess.run(["bash", str(REPO_ROOT / "benchmarks/gpu_session.sh")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - start < 20
    assert not [p for p in psutil.process_iter(["cmdline"]) if "987.654" in (p.info["cmdline"] or [])]
    with tarfile.open(out / "gpu.tar.gz") as tar:
        session = tar.extractfile("./logs/session.txt").read().decode()
    assert "deadline: stopping the unfinished jobs" in session and "packing" in session
    assert sorted(p.name for p in out.iterdir()) == ["gpu.tar.gz"]
    assert len(list(tmp_path.glob("gpu-session.*"))) == 1  # its working folder under $TMPDIR, not /tmp


def test_the_gpu_session_without_out_stops_at_once_saying_so(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    done = subprocess.run(["bash", str(REPO_ROOT / "benchmarks/gpu_session.sh")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip().endswith("OUT: set OUT, the folder gpu.tar.gz goes to (the device sets it)")
    assert len(done.stderr.splitlines()) == 1 and list(tmp_path.iterdir()) == []


def test_gpu_prepare_refuses_a_wrong_corpus_and_an_uncommitted_tree(tmp_path):
    """What a lent call carries is checked here, before the call: one line and exit 1 for a corpus
    that is not the pinned one and for uncommitted changes, and no .gpu/ left behind."""
    repo = tmp_path / "repo"
    repo.mkdir()
    for name in ("params.yaml", "requirements.txt"):
        (repo / name).write_text((REPO_ROOT / name).read_text())
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    for command in (["init", "-q"], ["add", "."], ["commit", "-qm", "x"]):
        subprocess.run([*git, *command], cwd=repo, check=True)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("not Shakespeare")
    script = str(REPO_ROOT / "benchmarks/gpu_prepare.sh")

    wrong = subprocess.run(["bash", script, str(corpus)], cwd=repo, capture_output=True, text=True)
    assert wrong.returncode == 1 and len(wrong.stderr.strip().splitlines()) == 1
    assert "sha256" in wrong.stderr and "expected params.yaml's" in wrong.stderr

    (repo / "params.yaml").write_text("changed\n")
    dirty = subprocess.run(["bash", script, str(corpus)], cwd=repo, capture_output=True, text=True)
    assert dirty.returncode == 1 and dirty.stderr.startswith("error: uncommitted changes")
    assert not (repo / ".gpu").exists() and not (repo / ".gpu.partial").exists()


def test_the_tokenizer_hash_is_the_data_stages_own_and_repeats(tmp_path):
    """What a lent machine's tokenizer is held to: the data stages run in a scratch copy, the hash of
    the SentencePiece model they wrote; the same in a second copy, another for another vocabulary."""
    pipeline_runs = _benchmark_module("pipeline_runs")
    from tests.conftest import sha256_of, synthetic_play

    corpus = tmp_path / "corpus.txt"
    corpus.write_text(synthetic_play(30_000))
    hashes = []
    for name, vocab in (("a", 100), ("b", 100), ("c", 90)):
        work = pipeline_runs.scratch_copy(tmp_path / name)
        params = yaml.safe_load((work / "params.yaml").read_text())
        params["data"]["sha256"] = sha256_of(corpus.read_bytes())
        params["tokenizer"]["vocab_size"] = vocab
        (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
        with open(tmp_path / f"{name}.log", "w") as log:
            hashes.append(pipeline_runs.tokenizer_sha256(corpus, work, log))
        assert hashes[-1] == sha256_of((work / pipeline_runs.TOKENIZER_FILE).read_bytes())
    assert hashes[0] == hashes[1] != hashes[2]


def test_the_tokenizer_hash_command_refuses_a_missing_corpus_and_other_words(tmp_path):
    script = [sys.executable, "-m", "benchmarks.pipeline_runs"]
    missing = subprocess.run([*script, "tokenizer-sha256", str(tmp_path / "none.txt")], cwd=REPO_ROOT, env=CHECKOUT,
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr.strip() == f"error: {tmp_path / 'none.txt'}: no such file; expected a local copy of Tiny Shakespeare"
    other = subprocess.run([*script, "tokenizer", str(tmp_path)], cwd=REPO_ROOT, env=CHECKOUT, capture_output=True, text=True,
                           timeout=120)
    assert other.returncode == 1
    assert other.stderr.strip() == "usage: python -m benchmarks.pipeline_runs tokenizer-sha256 CORPUS"


def test_gpu_check_trains_no_sentencepiece_model_on_another_tokenizer(tmp_path, monkeypatch):
    """Without the CPU's tokenizer hash, or with one the machine's data stages do not reproduce, a
    study call naming a SentencePiece model ends in one line before anything trains, the character
    models of the same call included."""
    gpu_check = _benchmark_module("gpu_check")

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("text")
    results = tmp_path / "results"
    with pytest.raises(SystemExit) as unpinned:
        gpu_check.main(["--corpus", str(corpus), "--dry-run", "--study", "astra_alpha:5", "scribe_alpha:5",
                        "--results", str(results), "--log", str(tmp_path / "study.log")])
    assert unpinned.value.code == (
        "error: --study scribe_alpha: a SentencePiece model; expected --tokenizer-sha256 (the CPU's tokenizer, "
        ".gpu/tokenizer.sha256 from benchmarks/gpu_prepare.sh); nothing trained")
    assert not list(results.iterdir())

    pipeline_runs = _benchmark_module("pipeline_runs")
    monkeypatch.setattr(pipeline_runs, "tokenizer_sha256", lambda corpus, work, log: "b" * 64)
    gpu_study = _benchmark_module("gpu_study")
    monkeypatch.setattr(gpu_study, "run_stages", lambda *args, **kwargs: pytest.fail("a run trained"))
    with pytest.raises(SystemExit) as refused:
        gpu_study.study([("astra_alpha", 5), ("scribe_beta", 5), ("scribe_alpha", 6)], corpus, results,
                        tmp_path / "logs", None, 1, "a" * 64)
    assert str(refused.value) == (f"error: models/tokenizer/spm.model trained here (SentencePiece "
                                  f"{gpu_study.sentencepiece.__version__}) has sha256 {'b' * 64}; expected the "
                                  f"CPU's {'a' * 64} for scribe_alpha, scribe_beta; nothing trained")
    assert not list(results.iterdir())


def test_the_stage_times_table_names_every_stage_and_part():
    stage_times = _benchmark_module("stage_times")

    parts = {p: {"wall_s": 0.5, "cpu_s": 1.0} for p in stage_times.EVALUATE_PARTS}
    row = {"model": "leviathan", "wall_s": 151.0,
           "stage_s": {"train": 104.8, "generate": 11.2, "evaluate": 35.2, "report": 0.1},
           "timing": {"train": {"parts": {"per-epoch validation": {"wall_s": 10.7, "cpu_s": 20.0}}},
                      "evaluate": {"parts": parts}}}
    full = {"leviathan": {"runs": 4, "train_s": 208.5, "machines": ["NVIDIA H200"], "evaluate_s": None,
                          "evaluate_runs": 0}}
    text = stage_times.markdown({"machine": "an Intel Xeon", "steps_scale": 0.01, "quick": [row], "full": full})
    assert "on an Intel Xeon" in text and "(train.steps_scale 0.01)" in text
    assert "| leviathan | 151 | 104.8 | 10.7 | 11.2 | 35.2 | 0.5 | 0.5 | 0.5 | 0.5 | 0.5 | 0.5 |" in text
    assert "| leviathan | 4 | 208 | — | NVIDIA H200 |" in text
    assert "limit" not in text  # a report written before the limit was timed beside the runs
    timed = stage_times.markdown({"machine": "an Intel Xeon", "steps_scale": 0.01, "quick": [row], "full": full,
                                  "limit_gflops": [134.06, 140.0]})
    lines = timed.splitlines()
    assert lines[6] == ("The machine's limit (the faster library's 4096² float32 product, median of 5) was 134.1 "
                        "GFLOP/s just before the runs and 140.0 just after.")
    assert timed.replace(lines[6] + "\n\n", "") == text
    assert stage_times.limit_gflops(torch.device("cpu"), size=64) > 0
    three = stage_times.markdown({"machine": "a CPU", "steps_scale": 0.01, "quick": [{**row, "runs_s": [174.2, 151.0, 140.4]}],
                                  "full": full})
    assert "every run's total: leviathan 174, 151, 140 s." in three and "| leviathan | 151 | 104.8 |" in three


def test_a_full_evaluation_is_timed_on_a_model_trained_one_step():
    """--full-evaluation rewrites only the chosen entry's epochs and steps (comments and every other
    entry as they were), and its table gives each evaluate part's seconds."""
    stage_times = _benchmark_module("stage_times")

    text = (REPO_ROOT / "params.yaml").read_text()
    changed = stage_times.one_step_entry(text, "astra_gamma")
    before, after = yaml.safe_load(text), yaml.safe_load(changed)
    assert (after["models"]["astra_gamma"]["epochs"], after["models"]["astra_gamma"]["steps_per_epoch"]) == (1, 1)
    after["models"]["astra_gamma"].update({k: before["models"]["astra_gamma"][k] for k in ("epochs", "steps_per_epoch")})
    assert after == before and changed.count("\n") == text.count("\n") and "# " in changed
    parts = {p: {"wall_s": float(i), "cpu_s": 0.0} for i, p in enumerate(stage_times.EVALUATE_PARTS)}
    table = stage_times.evaluation_markdown({"machine": "a CPU", "full_evaluation": [
        {"model": "astra_gamma", "evaluate": {"wall_s": 224.8, "parts": parts}}]})
    assert "| astra_gamma | 224.8 | 0.0 | 1.0 | 2.0 | 3.0 | 4.0 | 5.0 |" in table


def test_two_processes_times_each_way_and_the_crossover(tmp_path):
    """`two_processes.py --quick`: the workload alone, then two processes in each of the three ways,
    and the per-step product on and off the pool; the tables and the JSON say what ran."""
    out = tmp_path / "two.md"
    done = subprocess.run([sys.executable, "-m", "benchmarks.two_processes", "--quick", "--workloads", "stateful",
                           "--markdown", str(out), "--json", str(tmp_path / "two.json")], cwd=REPO_ROOT,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")}, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "two.json").read_text())
    (row,) = report["pairs"]
    assert (row["model"], row["workload"]) == ("astra_alpha", "stateful") and row["alone_s"] > 0
    for way in ("every core, no rule", "every core", "half the cores"):
        assert row[way]["finished"] and len(row[way]["kept"]) == 2  # two processes, each its share kept
    assert row["half the cores"]["threads"] == max(1, (os.cpu_count() or 1) // 2)
    assert report["min_parallel_narrow_macs"] == 2**19 and len(report["crossover"]) == 4  # batch 1, 4, 16, 64
    text = out.read_text()
    assert "| astra_alpha | stateful |" in text and "## Where the thread pool pays" in text


def test_two_processes_table_says_which_pairs_did_not_finish():
    two_processes = _benchmark_module("two_processes")

    row = {"model": "m", "workload": "training", "alone_s": 1.0,
           "every core": {"finished": False, "after_s": 36.0},
           "half the cores": {"finished": True, "seconds": [2.0, 4.0], "kept": [0.5, 0.25], "threads": 1}}
    text = two_processes.markdown({"machine_line": "a CPU", "date": "d", "repeats": 3, "tokens": 64, "steps": 1,
                                   "min_parallel_narrow_macs": 2**19, "pairs": [row], "crossover": []})
    assert ("| m | training | 1.000 s | as with the rule (no product under it) | not finished after 36.0 s | "
            "2.000 s (50%), 4.000 s (25%) |") in text


def test_build_time_times_both_ways_in_turn_and_reports_their_ratio(monkeypatch, tmp_path):
    """`build_time.py`: each round builds one unit, then the units apart (a fresh process and an
    empty cache each, faked here: a real build is a minute), and the report gives medians and ratios."""
    build_time = _benchmark_module("build_time")

    seconds = {True: iter([(40.0, 39.0), (50.0, 47.0), (44.0, 45.0)]),
               False: iter([(120.0, 240.0), (140.0, 250.0), (130.0, 260.0)])}
    order = []
    monkeypatch.setattr(build_time, "build_once", lambda one_unit: order.append(one_unit) or next(seconds[one_unit]))
    markdown, figures = tmp_path / "build.md", tmp_path / "build.json"
    build_time.main(["--rounds", "3", "--markdown", str(markdown), "--json", str(figures)])
    assert order == [True, False] * 3
    saved = json.loads(figures.read_text())
    assert saved["ways"]["one unit"]["wall_s"] == 44.0 and saved["ways"]["units apart"]["cpu_s"] == 250.0
    text = markdown.read_text()
    assert "| one unit | 44.0 | 45.0 | 40.0, 50.0, 44.0 |" in text
    assert "Units apart against one unit: 2.95x the wall time, 5.56x the CPU time." in text
    with pytest.raises(SystemExit):
        build_time.main(["--rounds", "0"])


def test_a_failed_build_is_named_by_the_build_time_benchmark(monkeypatch):
    build_time = _benchmark_module("build_time")

    monkeypatch.setattr(build_time.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(
        a, 1, stdout="", stderr="ninja: build stopped\nError building extension 'x'\n"))
    with pytest.raises(RuntimeError, match=r"the build \(units apart\) failed: Error building extension 'x'"):
        build_time.build_once(False)


def test_busy_neighbour_keeps_each_policys_share_and_says_when_bits_differ(monkeypatch):
    """Each case against its own policy alone, medians over rounds, and the bits against the first run
    alone (a stand-in training: what the benchmark makes of the figures, not the machine's speed)."""
    busy_neighbour = _benchmark_module("busy_neighbour")
    cases = {name: busy_neighbour.NEIGHBOURS[name] for name in ("alone", "beside a Python loop", "beside a numpy loop")}
    rates = iter([100, 50, 40, 90, 80, 85, 110, 60, 30, 95, 70, 90])  # round by round: policy, then case
    monkeypatch.setattr(busy_neighbour, "_one", lambda corpus, model, scale, neighbours, policy: {
        "tokens_per_second": next(rates), "threads": 2,
        "weights_sha256": "other" if (policy, neighbours) == ("PASSIVE", cases["beside a numpy loop"]) else "same"})
    report = busy_neighbour.measure(Path("corpus"), "astra_alpha", 0.1, 2, ["default", "passive"], cases)
    rows = {(r["policy"], r["neighbour"]): r for r in report["rows"]}
    assert rows[("default", "beside a Python loop")]["kept"] == pytest.approx(55 / 105)
    assert rows[("passive", "beside a numpy loop")]["kept"] == pytest.approx(87.5 / 92.5)
    assert [r["same_bits"] for r in report["rows"]] == [True, True, True, True, True, False]
    text = busy_neighbour.markdown({**report, "machine_line": "a CPU"})
    assert "| passive | beside a numpy loop | 2, 2 | 88 | 95% | 85, 90 | no |" in text


def test_busy_neighbour_runs_each_process_in_a_tmpdir_of_its_own_and_kills_its_neighbours(monkeypatch, tmp_path):
    """Every neighbour started (an rnnlm training as this file's child, at its nice) in its own TMPDIR,
    the measured run in another, and each neighbour killed after it."""
    busy_neighbour = _benchmark_module("busy_neighbour")
    started, killed = [], []

    class Neighbour:
        def __init__(self, command, env, **_):
            started.append((command, env["TMPDIR"]))

        def kill(self):
            killed.append(True)

        def wait(self):
            pass

    def training(command, env, **_):
        started.append((command, env["TMPDIR"]))
        return subprocess.CompletedProcess(command, 0, '{"tokens_per_second": 1}', "")

    monkeypatch.setattr(busy_neighbour.subprocess, "Popen", Neighbour)
    monkeypatch.setattr(busy_neighbour.subprocess, "run", training)
    monkeypatch.setattr(busy_neighbour.time, "sleep", lambda s: None)
    case = busy_neighbour.NEIGHBOURS["beside two rnnlm trainings at nice 10, other TMPDIRs"]
    assert busy_neighbour._one(tmp_path / "corpus.txt", "astra_alpha", 0.1, case, None) == {"tokens_per_second": 1}
    assert [c[:3] + c[-2:] for c, _ in started[:2]] == [["nice", "-n", "10", "astra_alpha", "1.0"]] * 2
    assert started[2][0][-2:] == ["astra_alpha", "0.1"] and len({tmpdir for _, tmpdir in started}) == 3
    assert len(killed) == 2


def test_context_cost_times_other_batch_widths_beside_the_curves_own(tmp_path):
    """`context_cost.py --quick --batch-tokens N`: each width is held to the curve's own losses and timed
    beside it, a column each (what a GPU call would compare)."""
    done = subprocess.run([sys.executable, "-m", "benchmarks.context_cost", "--quick", "--batch-tokens", "64", "1024",
                           "--json", str(tmp_path / "c.json")], cwd=REPO_ROOT, env=CHECKOUT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    rows = json.loads((tmp_path / "c.json").read_text())["rows"]
    assert [(r["c"], sorted(r["other_us"])) for r in rows] == [(4, ["1024", "64"]), (32, ["1024", "64"])]
    assert "| 64 tokens a batch, us | 1,024 tokens a batch, us |" in done.stdout


def test_seed_streams_sets_seeds_stepped_together_beside_one_seed_and_processes(tmp_path):
    """`seed_streams.py --quick` (the CPU: graphs are eager steps, streams one): per model one seed,
    two seeds in one call both ways, one and two worker processes; each together-contender's losses
    are those of the seeds stepped alone, exactly here (no dropout, the same eager steps)."""
    done = subprocess.run([sys.executable, "-m", "benchmarks.seed_streams", "--quick", "--models", "leviathan",
                           "--json", str(tmp_path / "s.json"), "--markdown", str(tmp_path / "s.md")],
                          cwd=REPO_ROOT, env=CHECKOUT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    rows = json.loads((tmp_path / "s.json").read_text())["rows"]
    assert [(r["contender"], r["seeds"]) for r in rows] == [
        ("one seed", 1), ("2 seeds, one graph, a stream each", 2), ("2 seeds, one graph, in turn", 2),
        ("1 process", 1), ("2 processes", 2)]
    assert [r["largest_loss_difference"] for r in rows] == [None, 0.0, 0.0, None, None]
    assert all(r["model"] == "leviathan" and r["tokens_per_second"] > 0 for r in rows)
    assert "| leviathan | 2 seeds, one graph, a stream each | 2 |" in (tmp_path / "s.md").read_text()


def test_thread_bits_lists_each_large_product_of_a_step_and_computes_it_as_the_library_does():
    """The products a step sums (`thread_bits.products`): per layer the input product, its input
    gradient and the two weight gradients over every batch x sequence row, then the output layer's
    three; `_product` computes each through `rnnlm.compute.products` (checked against float64)."""
    from rnnlm.models.config import ModelConfig

    thread_bits = _benchmark_module("thread_bits")
    levi = thread_bits.products(ModelConfig(cell="lstm", vocab_size=65, embd=768, hidden=1024, layers=3), 8192)
    assert len(levi) == 3 * 4 + 3
    assert levi[0] == ("layer 1 input product", 8192, 768, 4096, False)
    assert levi[3] == ("layer 1 hidden weight gradient", 4096, 8192, 1024, True)
    assert levi[4] == ("layer 2 input product", 8192, 1024, 4096, False)
    assert levi[-1] == ("output weight gradient", 65, 8192, 1024, True)
    alpha = thread_bits.products(ModelConfig(cell="gru", vocab_size=65, embd=64, hidden=128, layers=1), 8192)
    assert [p[1:4] for p in alpha] == [(8192, 64, 384), (8192, 384, 64), (384, 8192, 64), (384, 8192, 128),
                                       (8192, 128, 65), (8192, 65, 128), (65, 8192, 128)]
    for m, k, n, grad in [(24, 300, 16, True), (300, 24, 16, False)]:
        out = thread_bits._product(m, k, n, grad)()
        assert out.shape == (m, n)
        make = torch.Generator().manual_seed(m * 7 + k * 3 + n)
        if grad:
            a, b = torch.randn(k, m, generator=make), torch.randn(k, n, generator=make)
            expected = a.double().T @ b.double()
        else:
            x, w = torch.randn(m, k, generator=make), torch.randn(n, k, generator=make)
            expected = x.double() @ w.double().T
        assert torch.allclose(out.double(), expected, rtol=1e-5, atol=1e-4)


def test_thread_bits_tells_same_bits_from_other_bits_and_costs_each_way_round_by_round(monkeypatch):
    """`_same` against a result that depends on the thread count and one that does not; `measure`'s
    cost is the median of each round's ratio to the first way in the same round, and a way whose
    rounds disagree on the bits says "varies" (a stand-in for the processes)."""
    thread_bits = _benchmark_module("thread_bits")
    before = torch.get_num_threads()
    try:
        assert thread_bits._same(lambda: torch.ones(3), 2) == (True, 0.0)
        assert thread_bits._same(lambda: torch.full((2,), float(torch.get_num_threads())), 2) == (False, 1.0)
    finally:
        torch.set_num_threads(before)
    # round by round: mkl, mkl strict, onednn, mkl strict + onednn narrow
    seconds = iter([1.0, 1.1, 2.0, 1.0, 2.0, 2.4, 4.0, 2.0, 0.5, 0.5, 1.2, 0.5])
    calls = iter(range(12))

    def one(model, way, steps, tokens):
        i = next(calls)
        step = next(seconds)
        return {"gemm": way, "threads": 2, "step_seconds": step, "shapes": {"p": [1, 2, 3]},
                "products": [{"name": "p", "same": way != "mkl", "largest_difference": 0.0}],
                "gradients_same": way != "mkl" and not (way == "onednn" and i == 10), "gradients_largest_difference": 0.0,
                "stateful_same": way != "mkl", "stateful_ms_per_token": 3 * step}

    monkeypatch.setattr(thread_bits, "_one", one)
    ways = ["mkl", "mkl strict", "onednn", "mkl strict, onednn narrow"]
    records = {r["way"]: r for r in thread_bits.measure(["astra_alpha"], 3, 5, 300, ways)}
    assert records["mkl"]["step_seconds"] == 1.0 and records["mkl"]["against_first"] == 1.0
    assert records["mkl strict"]["step_seconds"] == 1.1 and records["mkl strict"]["against_first"] == pytest.approx(1.1)
    assert records["onednn"]["against_first"] == pytest.approx(2.0)  # ratios 2.0, 2.0, 2.4
    assert not records["onednn"]["repeatable"] and records["mkl strict"]["repeatable"]
    text = thread_bits.markdown({"machine_line": "a CPU", "rounds": 3, "steps": 5, "tokens": 300, "records": list(records.values())})
    assert records["onednn"]["stateful_against_first"] == pytest.approx(2.0)
    assert "| astra_alpha | mkl | mkl | p | no | 1.000 | 1.00x | no | 3.00 | 1.00x |" in text
    assert "| astra_alpha | onednn | onednn | none | yes (varies) | 2.000 | 2.00x | yes | 6.00 | 2.00x |" in text


def test_the_machine_line_names_each_kind_of_products_library():
    timing = _benchmark_module("timing")
    info = {"date": "d", "cpu_vendor": "GenuineIntel", "cpu_model": "Xeon", "avx512": True, "cores": 2,
            "freed_memory_kept": False, "torch": "t", "threads": 2, "device": "cpu"}
    assert "through MKL ·" in timing.machine_line({**info, "gemm": "mkl"})
    assert "through MKL (strict) ·" in timing.machine_line({**info, "gemm": "mkl", "mkl_cbwr": "AUTO,STRICT"})
    assert "through MKL (large), oneDNN (per step) ·" in timing.machine_line({**info, "gemm": "mkl:onednn"})
    assert ("through MKL (strict) (large), MKL (strict) (per step), oneDNN (per step of one row) ·"
            in timing.machine_line({**info, "gemm": "mkl:mkl:onednn", "mkl_cbwr": "AUTO,STRICT"}))


def test_the_benchmarks_are_a_package_that_edits_no_import_path_and_docs_layout_names_each_file():
    """Each benchmark runs as `python -m benchmarks.NAME`: none edits sys.path or needs an E402
    exemption (an import after code), and docs/layout.md names every file of the folder."""
    folder = REPO_ROOT / "benchmarks"
    assert (folder / "__init__.py").is_file()
    layout = (REPO_ROOT / "docs/layout.md").read_text()
    for path in sorted(p for p in folder.iterdir() if p.is_file() and p.name != "__init__.py"):
        text = path.read_text()
        assert "sys.path" not in text and "E402" not in text, path.name
        assert path.name in layout or f"{path.stem}," in layout or f"{path.stem};" in layout, path.name
