"""The study on more than one machine, the DVC way: each machine is a clone that trains its model as
an experiment and pushes it (`dvc exp push origin`, outputs and run cache to the DVC remote); the
collecting clone pulls them (`dvc exp pull origin`) and builds the study from them. A bare git
repository stands for the shared git server, a local folder for the DVC remote.

tests/study/test_slurm.py runs the same commands as the tasks of an array job (cluster/study.sbatch), with
more checks; this test is the path's check on machines where that one cannot start its cluster."""

from __future__ import annotations

import json
import os
import shutil
import sys

import pytest

from tests.conftest import REPO_ROOT, make_dvc_repo, run, synthetic_play, why_no_slurm


def _tiny(params: dict) -> None:
    params["tokenizer"]["vocab_size"] = 100
    params["train"].update({"batch_size": 4, "seq_len": 16, "device": "cpu"})
    params["evaluate"].update({"context_targets": 100, "context_lengths": [1, 2, 4, 8]})
    params["generate"].update({"max_new_tokens": 10})
    for name in ("astra_alpha", "rnn_alpha"):
        params["models"][name].update({"embd": 8, "hidden": 12, "layers": 1, "epochs": 2, "steps_per_epoch": 3})


def _clone(origin, path):
    run(["git", "clone", "-q", str(origin), str(path)], path.parent)
    run(["git", "config", "user.email", "test@example.invalid"], path)
    run(["git", "config", "user.name", "test"], path)
    return path


@pytest.mark.slow
@pytest.mark.skipif(why_no_slurm() is None, reason="tests/study/test_slurm.py runs this path, as an array job's tasks")
def test_two_machines_push_their_runs_and_a_third_collects_the_study(tmp_path):
    origin, storage = tmp_path / "origin.git", tmp_path / "dvc-storage"
    run(["git", "init", "-q", "--bare", "-b", "main", str(origin)], tmp_path)
    seed = make_dvc_repo(tmp_path / "seed", synthetic_play(20_000), _tiny)
    run(["dvc", "remote", "add", "-d", "team", str(storage)], seed)
    (seed / "reports/study").mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO_ROOT / "reports/study/registration-1.yaml", seed / "reports/study")  # the study's rules
    run(["git", "add", "-A"], seed)
    run(["git", "commit", "-qm", "the team's DVC remote"], seed)
    run([sys.executable, "-m", "rnnlm_study", "register", "--seal", "reports/study/registration-1.yaml"], seed)
    run(["git", "add", "-A"], seed)
    run(["git", "commit", "-qm", "the rules sealed"], seed)
    run(["git", "push", "-q", str(origin), "HEAD:main"], seed)

    # Each machine: a clone that trains one model as an experiment and shares it.
    for machine, model in (("machine-a", "astra_alpha"), ("machine-b", "rnn_alpha")):
        clone = _clone(origin, tmp_path / machine)
        run(["dvc", "exp", "run", "--pull", "--allow-missing", "-n", f"{model}-run", "-S", f"model={model}"], clone)
        run(["dvc", "exp", "push", "--run-cache", "origin", f"{model}-run"], clone)
    assert (storage / "runs").is_dir()  # the run cache went to the DVC remote with the experiments

    collector = _clone(origin, tmp_path / "collector")
    remote_exps = run(["git", "ls-remote", str(origin), "refs/exps/*"], collector).stdout
    assert "astra_alpha-run" in remote_exps and "rnn_alpha-run" in remote_exps
    run(["dvc", "exp", "pull", "origin", "astra_alpha-run", "rnn_alpha-run"], collector)
    env = {"PYTHONPATH": str(REPO_ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    said = run([sys.executable, "-m", "rnnlm_study", "collect"], collector, env=env).stdout
    assert "astra_alpha seed 1337: wrote" in said and "rnn_alpha seed 1337: wrote" in said
    for model in ("astra_alpha", "rnn_alpha"):
        provenance = json.loads((collector / f"reports/study/{model}/seed-1337/provenance.json").read_text())
        assert provenance["experiment"] == f"{model}-run" and provenance["device"] == "cpu"
        metrics = json.loads((collector / f"reports/study/{model}/seed-1337/metrics.json").read_text())
        assert metrics["model"] == model and metrics["stateful_bpc"] > 0
    run([sys.executable, "-m", "rnnlm_study", "report"], collector, env=env)
    table = (collector / "reports/study.md").read_text()
    assert "[astra_alpha](study/astra_alpha/seed-1337/generations.md)" in table
    assert "[rnn_alpha](study/rnn_alpha/seed-1337/generations.md)" in table
    assert "experiment astra_alpha-run" in table and "experiment rnn_alpha-run" in table
