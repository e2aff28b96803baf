"""The study on a real Slurm: a single-node cluster started on this machine (munged, slurmctld and
slurmd from Debian's slurm-wlm and munge, a config made here), one array job of two models × two
seeds against a bare git repository and a local DVC remote standing for the team's, cancelled,
submitted again, pulled and collected."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rnnlm_study.campaign.slurm import slurm_states
from tests.conftest import REPO_ROOT, make_dvc_repo, run, synthetic_play, tiny_models, why_no_slurm
from tests.study.study_repo import REGISTRATION

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A running one-node Slurm cluster of this machine's CPUs; yields the clients' environment."""
    why = why_no_slurm()
    if why:
        pytest.skip(why)
    root = tmp_path_factory.mktemp("slurm")
    for sub in ("munge", "state", "spool", "log"):
        (root / sub).mkdir()
    (root / "munge").chmod(0o755)
    key = root / "munge/key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    sock = root / "munge/socket"
    subprocess.run(["munged", "--force", f"--socket={sock}", f"--key-file={key}", f"--log-file={root}/log/munged.log",
                    f"--pid-file={root}/munge/pid", f"--seed-file={root}/munge/seed"], check=True)
    host = socket.gethostname().split(".")[0]
    conf = root / "slurm.conf"
    conf.write_text("\n".join([
        "ClusterName=rnnlmtest", f"SlurmctldHost={host}", "SlurmUser=root", "SlurmdUser=root",
        f"SlurmctldPort={_free_port()}", f"SlurmdPort={_free_port()}", "AuthType=auth/munge",
        f"AuthInfo=socket={sock}", "CredType=cred/munge", f"StateSaveLocation={root}/state",
        f"SlurmdSpoolDir={root}/spool", f"SlurmctldPidFile={root}/slurmctld.pid", f"SlurmdPidFile={root}/slurmd.pid",
        f"SlurmctldLogFile={root}/log/slurmctld.log", f"SlurmdLogFile={root}/log/slurmd.log",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core", "SchedulerType=sched/backfill", "MpiDefault=none", "ReturnToService=2",
        "AccountingStorageType=accounting_storage/none", "JobCompType=jobcomp/none",
        "JobAcctGatherType=jobacct_gather/none", "PlugStackConfig=/dev/null", "KillWait=5",
        f"NodeName={host} CPUs={os.cpu_count()} State=UNKNOWN",
        "PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP", ""]))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    try:
        subprocess.run(["slurmctld", "-f", str(conf)], env=env, check=True)
        subprocess.run(["slurmd", "-f", str(conf)], env=env, check=True)
        deadline = time.monotonic() + 60
        while "idle" not in subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True,
                                           text=True).stdout:
            if time.monotonic() > deadline:
                pytest.fail("the test cluster's node never came up: " + (root / "log/slurmd.log").read_text()[-2000:])
            time.sleep(0.5)
        yield env
    finally:
        subprocess.run(["scontrol", "shutdown"], env=env, capture_output=True)
        subprocess.run(["munged", "--stop", f"--socket={sock}"], capture_output=True)


def _tiny(params: dict) -> None:
    tiny_models(params)
    params["generate"]["max_new_tokens"] = 10


def _wait_for_job(env: dict, job: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while subprocess.run(["squeue", "-h", "-j", job], env=env, capture_output=True, text=True).stdout.strip():
        assert time.monotonic() < deadline, f"job {job} still queued or running after {timeout:.0f} s"
        time.sleep(1)


def _states(repo: Path) -> dict[str, str]:
    """Each run's newest state, as its task wrote it."""
    return {name: state for name, (state, _) in slurm_states(repo).items()}


def _remote_refs(repo: Path) -> dict[str, str]:
    listed = run(["git", "ls-remote", "origin", "refs/exps/*"], repo).stdout
    return {line.split("\t")[1].rsplit("/", 1)[1]: line.split("\t")[0] for line in listed.splitlines()}


def tasks_venv(tmp_path: Path) -> Path:
    """The environment the array tasks activate (`--venv`): the virtual environment running this
    test where there is one (a venv made over it with --system-site-packages would see the *base*
    interpreter's packages, not this one's); else a venv over the base interpreter's packages."""
    if sys.prefix != sys.base_prefix:
        return Path(sys.prefix)
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], tmp_path)
    return venv


def test_the_tasks_get_the_environment_that_runs_the_tests(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "project-venv"))
    monkeypatch.setattr(sys, "base_prefix", "/usr")
    assert tasks_venv(tmp_path) == tmp_path / "project-venv"


@pytest.mark.slow
@pytest.mark.long
def test_an_array_job_trains_each_model_and_seed_and_a_cancelled_one_is_resubmitted(cluster, tmp_path):
    origin, storage = tmp_path / "origin.git", tmp_path / "dvc-storage"
    run(["git", "init", "-q", "--bare", "-b", "main", str(origin)], tmp_path)
    seed_repo = make_dvc_repo(tmp_path / "seed", synthetic_play(20_000), _tiny)
    shutil.copytree(REPO_ROOT / "cluster", seed_repo / "cluster")
    (seed_repo / "reports/study").mkdir(parents=True)
    shutil.copy(REGISTRATION, seed_repo / "reports/study")  # the registered rules `report` judges by
    run(["dvc", "remote", "add", "-d", "team", str(storage)], seed_repo)
    run(["git", "add", "-A"], seed_repo)
    run(["git", "commit", "-qm", "the team's DVC remote, the cluster script and the registered rules"], seed_repo)
    run([sys.executable, "-m", "rnnlm_study", "register", "--seal", "reports/study/registration-1.yaml"], seed_repo)
    run(["git", "add", "-A"], seed_repo)
    run(["git", "commit", "-qm", "the rules sealed"], seed_repo)
    run(["git", "push", "-q", str(origin), "HEAD:main"], seed_repo)
    repo = tmp_path / "submitter"
    run(["git", "clone", "-q", str(origin), str(repo)], tmp_path)
    venv = tasks_venv(tmp_path)
    env = {**cluster, "PYTHONPATH": str(REPO_ROOT / "src")}
    submit = [sys.executable, "-m", "rnnlm_study", "run", "--slurm", "--models", "astra_alpha", "rnn_alpha",
              "--seeds", "2", "--gpus", "0", "--cpus-per-task", "1", "--time", "10", "--venv", str(venv),
              "--scratch", str(tmp_path / "scratch")]

    first = run(submit, repo, env=env)
    job = first.stdout.split("submitted job ")[1].split(":")[0]
    assert "4 runs" in first.stdout and f"squeue -j {job}" in first.stdout
    runs = next(repo.glob(".slurm/*/runs.txt")).read_text().splitlines()
    assert runs == ["astra_alpha 1337 astra_alpha-seed1337", "astra_alpha 1 astra_alpha-seed1",
                    "rnn_alpha 1337 rnn_alpha-seed1337", "rnn_alpha 1 rnn_alpha-seed1"]
    deadline = time.monotonic() + 240
    while "done" not in _states(repo).values():
        assert time.monotonic() < deadline, f"no run finished: {_states(repo)}"
        time.sleep(1)
    run(["scancel", job], repo, env=cluster)  # the rest dies: some running, some never started
    _wait_for_job(cluster, job)
    done_before = {name for name, state in _states(repo).items() if state == "done"}
    pushed_before = _remote_refs(repo)  # a task cancelled while it pushed may have pushed too
    assert done_before <= set(pushed_before) and len(pushed_before) < 4
    status = run([sys.executable, "-m", "rnnlm_study", "status", "--models", "astra_alpha", "rnn_alpha", "--seeds",
                  "2"], repo, env=env).stdout
    for line in status.splitlines()[1:]:
        model, seed = line.split()[:2]
        name = f"{model}-seed{seed}"
        assert ("pushed to origin, not pulled" in line) == (name in pushed_before), line

    again = run(submit, repo, env=env)  # the same command: only what is not pushed yet
    assert all(f"already pushed as {name}" in again.stdout for name in pushed_before)
    second = again.stdout.split("submitted job ")[1].split(":")[0]
    assert f"{4 - len(pushed_before)} runs" in again.stdout
    _wait_for_job(cluster, second)
    assert all(state == "done" for name, state in _states(repo).items() if name not in pushed_before), _states(repo)
    pushed = _remote_refs(repo)
    assert set(pushed) == {"astra_alpha-seed1337", "astra_alpha-seed1", "rnn_alpha-seed1337", "rnn_alpha-seed1"}
    assert {name: pushed[name] for name in pushed_before} == pushed_before  # finished runs were not redone

    run(["dvc", "exp", "pull", "origin", *pushed], repo, env=env)
    collected = run([sys.executable, "-m", "rnnlm_study", "collect"], repo, env=env).stdout
    for model in ("astra_alpha", "rnn_alpha"):
        for seed in (1337, 1):
            provenance = json.loads((repo / f"reports/study/{model}/seed-{seed}/provenance.json").read_text())
            assert provenance["experiment"] == f"{model}-seed{seed}" and provenance["seed"] == seed
            assert provenance["device"] == "cpu"
    assert collected.count("wrote") == 4
    assert (storage / "runs").is_dir()  # each task pushed its run cache to the DVC remote with its experiment
    run([sys.executable, "-m", "rnnlm_study", "report"], repo, env=env)
    table = (repo / "reports/study.md").read_text()
    for model in ("astra_alpha", "rnn_alpha"):
        assert f"[{model}](study/{model}/seed-1337/generations.md)" in table
        assert f"experiment {model}-seed1337" in table and f"experiment {model}-seed1 " in table
    status = run([sys.executable, "-m", "rnnlm_study", "status", "--models", "astra_alpha", "rnn_alpha", "--seeds",
                  "2"], repo, env=env).stdout
    assert status.count("collected") == 4
    nothing = run(submit, repo, env=env).stdout
    assert "nothing to submit" in nothing


def test_settings_come_from_the_config_file_then_the_command_line(tmp_path):
    from rnnlm.errors import RnnlmError
    from rnnlm_study.campaign.slurm import SlurmSettings, load_settings

    defaults = load_settings(REPO_ROOT / "cluster/slurm.yaml", {})
    assert defaults == SlurmSettings()  # the shipped file says what the code defaults to: one GPU per task
    assert defaults.sbatch_options() == ["--time=04:00:00", "--cpus-per-task=8", "--gres=gpu:1"]
    config = tmp_path / "slurm.yaml"
    config.write_text("partition: gpu\ntime: 12:00:00\ngpus: 2\nmem:\n")  # 12:00:00 unquoted: YAML reads a number
    settings = load_settings(config, {"gpus": 0, "cpus_per_task": None})
    assert settings.sbatch_options() == ["--time=12:00:00", "--cpus-per-task=8", "--partition=gpu"]
    config.write_text("partitions: gpu\n")
    with pytest.raises(RnnlmError, match="partitions: unknown key; expected one of partition, time"):
        load_settings(config, {})
    with pytest.raises(RnnlmError, match="slurm cpus_per_task: expected an integer of at least 1, got 0"):
        load_settings(tmp_path / "none.yaml", {"cpus_per_task": 0})


def test_a_resubmission_leaves_out_what_is_held_or_pushed():
    from rnnlm_study.campaign.slurm import runs_to_submit

    todo, skipped = runs_to_submit(["a", "b"], [1337, 1], held={("a", 1337)}, pushed={"b-seed1"}, steps_scale=1.0)
    assert todo == [("a", 1, "a-seed1"), ("b", 1337, "b-seed1337")]
    assert skipped == ["a seed 1337: held here already", "b seed 1: already pushed as b-seed1"]
