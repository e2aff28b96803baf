"""The cores shared among rnnlm processes (compute/threads.py) and the LayerNorm that lets a run
change its thread count without changing its bits (`rnnlm.models.language_model.layer_norm`)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import psutil
import pytest
import torch
import torch.nn.functional as F

from rnnlm.compute import backend, threads
from rnnlm.models.language_model import RecurrentLM, layer_norm
from rnnlm.training.train import probe_gradients
from tests.conftest import cell_configs


@pytest.fixture(autouse=True)
def keep_threads(monkeypatch):
    before = torch.get_num_threads()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    yield
    torch.set_num_threads(before)


def _norm_gradients(norm, n_threads: int, dtype=torch.float32):
    torch.set_num_threads(n_threads)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4096, 512, generator=g, dtype=dtype, requires_grad=True)  # (rows, H)
    weight = (1 + 0.1 * torch.randn(512, generator=g, dtype=dtype)).requires_grad_()
    bias = (0.1 * torch.randn(512, generator=g, dtype=dtype)).requires_grad_()
    y = norm(x, weight, bias)
    (y * torch.linspace(-1, 1, 512, dtype=dtype)).sum().backward()
    return y.detach(), x.grad, weight.grad, bias.grad


def _ours(x, weight, bias):
    return layer_norm(x, weight, bias, 1e-5)


def _pytorchs(x, weight, bias):
    return F.layer_norm(x, (x.shape[-1],), weight, bias, 1e-5)


def test_layer_norm_gives_pytorchs_forward_bits_and_its_gradients_in_float64():
    assert all(torch.equal(a, b) for a, b in zip(_norm_gradients(_ours, 1)[:2], _norm_gradients(_pytorchs, 1)[:2]))
    for a, b in zip(_norm_gradients(_ours, 2, torch.float64), _norm_gradients(_pytorchs, 2, torch.float64)):
        assert torch.allclose(a, b, rtol=1e-12, atol=1e-12)


def test_layer_norm_gradients_are_the_same_bits_at_one_and_at_two_threads():
    ours = [_norm_gradients(_ours, n) for n in (1, 2)]
    assert all(torch.equal(a, b) for a, b in zip(*ours))
    pytorchs = [_norm_gradients(_pytorchs, n) for n in (1, 2)]  # what it replaces: the sums over rows differ
    assert not torch.equal(pytorchs[0][2], pytorchs[1][2])


def _quiet_share(folder, cores):
    """A share that sees no busy process outside it, whatever else this machine runs (the other test
    worker): what these tests count is the share's own members."""
    return threads.CoreShare(folder, cores=cores, busy=lambda members: 0)


def _live_process():
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])


def _enter(folder, process):
    (folder / str(process.pid)).write_text(repr(psutil.Process(process.pid).create_time()))


def test_a_run_takes_its_share_of_the_cores_as_others_come_and_go(tmp_path):
    torch.set_num_threads(3)
    share = _quiet_share(tmp_path, cores=4)
    assert share.join() == 3  # no probe handed over yet: as it was
    share.check_with(lambda: [torch.ones(3)])
    assert share.refresh(now=True) == 4 and share.verified
    other = _live_process()
    try:
        _enter(tmp_path, other)
        (tmp_path / "123456789").write_text("1.0")  # a process long gone: its file is removed
        (tmp_path / "notes.txt").write_text("x")  # not a process's file at all
        (tmp_path / ".42.tmp").write_text("")  # another process's file, half written: left to its writer
        assert share.refresh() == 4  # counted again only a second later
        assert share.refresh(now=True) == 2
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted([".42.tmp", str(other.pid), share.joined.name])
        (tmp_path / ".42.tmp").unlink()
        other.send_signal(signal.SIGSTOP)  # paused (a benchmark beside it): it holds no core meanwhile
        while psutil.Process(other.pid).status() != psutil.STATUS_STOPPED:
            time.sleep(0.01)
        assert share.refresh(now=True) == 4 and (tmp_path / str(other.pid)).exists()
        other.send_signal(signal.SIGCONT)
        time.sleep(0.2)
        assert share.refresh(now=True) == 2
    finally:
        other.kill()
        other.wait()
    assert share.refresh(now=True) == 4
    share.leave()
    assert list(tmp_path.iterdir()) == []


def test_a_run_whose_gradients_depend_on_the_threads_keeps_its_count(tmp_path, capsys):
    torch.set_num_threads(4)
    share = _quiet_share(tmp_path, cores=4)
    share.join()
    share.check_with(lambda: [torch.tensor([float(torch.get_num_threads())])])
    other = _live_process()
    try:
        _enter(tmp_path, other)  # its share would be 2 threads: the probe runs first, and fails
        assert share.refresh(now=True) == 4 and torch.get_num_threads() == 4
        assert share.probed and not share.verified and "differ in their last bits" in share.why_fixed
        notes = capsys.readouterr().out.splitlines()
        assert notes == ["note: this run computes on 4 threads from here on: " + share.why_fixed]
        assert share.refresh(now=True) == 4 and capsys.readouterr().out == ""  # said once, probed once
    finally:
        other.kill()
        other.wait()
        share.leave()


def test_a_run_alone_never_computes_the_probe_and_one_beside_another_computes_it_once(tmp_path):
    """The probe costs a forward and backward pass at each count: it runs only before the count
    first changes, and never while the run is alone."""
    torch.set_num_threads(4)
    share = _quiet_share(tmp_path, cores=4)
    calls = []
    share.join()
    share.check_with(lambda: calls.append(torch.get_num_threads()) or [torch.ones(1)])
    assert [share.refresh(now=True) for _ in range(3)] == [4, 4, 4] and calls == [] and not share.probed
    other = _live_process()
    try:
        _enter(tmp_path, other)
        assert share.refresh(now=True) == 2 and calls == [1, 4]  # at one thread, then at every core
    finally:
        other.kill()
        other.wait()
    assert share.refresh(now=True) == 4 and calls == [1, 4]  # verified once: not computed again
    share.leave()


def test_a_thread_count_set_by_hand_is_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    share = _quiet_share(tmp_path, cores=4)
    share.join()
    share.check_with(lambda: [torch.ones(1)])
    assert share.refresh(now=True) == 1 and not share.probed
    assert [p.name for p in tmp_path.iterdir()] == [str(share.joined.name)]  # the others still count it
    share.leave()


@pytest.mark.parametrize("spoil", ["a file in its place", "a folder inside it", "not writable"])
def test_a_share_that_cannot_be_joined_costs_the_share_not_the_run(tmp_path, monkeypatch, capsys, spoil):
    """The share's folder is another user's business too: a file where it should be, a folder inside
    it, or a folder this process cannot write. The run keeps its thread count and says so once."""
    folder = tmp_path / "rnnlm-cores"
    if spoil == "a file in its place":
        folder.write_text("x")
    elif spoil == "a folder inside it":
        (folder / "4242").mkdir(parents=True)
    else:
        folder.mkdir()
        def refuse(self, *args, **kwargs):
            raise PermissionError(13, "Permission denied")
        monkeypatch.setattr(threads.Path, "write_text", refuse)
    torch.set_num_threads(2)
    share = _quiet_share(folder, cores=4)
    assert share.join() == 2
    share.check_with(lambda: [torch.ones(1)])
    assert share.refresh(now=True) == (4 if spoil == "a folder inside it" else 2)  # the folder isn't counted
    assert share.verified is (spoil == "a folder inside it")
    notes = capsys.readouterr().out.splitlines()
    if spoil == "a folder inside it":
        assert notes == [] and (folder / "4242").is_dir()
        share.leave()
    else:
        assert len(notes) == 1 and notes[0].startswith("note: this process computes on 2 threads from here on: "
                                                       f"the core share's folder {folder} cannot be used (")


def test_a_stage_whose_share_folder_is_a_file_runs_all_the_same(tmp_path):
    import os
    (tmp_path / "rnnlm-cores").write_text("not a folder")
    done = subprocess.run([sys.executable, "-c", "from rnnlm.compute import threads; import torch; "
                           "print(threads.join() == torch.get_num_threads())"], capture_output=True, text=True,
                          env={**os.environ, threads.FOLDER_ENV: str(tmp_path / "rnnlm-cores")})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1] == "True" and len(lines) == 2 and "cannot be used (File exists)" in lines[0]


def test_the_probe_leaves_the_model_and_the_random_state_as_they_were():
    config = next(c for c in cell_configs({"layer_norm": True}, vocab_size=30, embd=8, hidden=16) if c.cell == "lstm")
    model = RecurrentLM(config).train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    grads = probe_gradients(model, 4, 12, 30)
    assert len(grads) == len(list(model.parameters())) and all(g is not None for g in grads)
    assert all(p.grad is None for p in model.parameters()) and model.training
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert torch.equal(rng, torch.get_rng_state())
    assert all(torch.equal(a, b) for a, b in zip(grads, probe_gradients(model, 4, 12, 30)))


@pytest.mark.parametrize("vendor, before, after", [
    ("GenuineIntel", None, backend.MKL_STRICT),  # Intel: strict, so a step's bits do not hang on the count
    ("GenuineIntel", "", ""),  # set by hand, even empty (MKL's mode off): kept
    ("GenuineIntel", "AVX2", "AVX2"),
    ("AuthenticAMD", None, None),  # another vendor: its bits as they were
])
def test_mkl_is_asked_for_its_strict_mode_on_intel_cpus_only(monkeypatch, vendor, before, after):
    monkeypatch.setattr(backend.cpu, "cpu_vendor", lambda: vendor)
    if before is None:
        monkeypatch.delenv("MKL_CBWR", raising=False)
    else:
        monkeypatch.setenv("MKL_CBWR", before)
    assert backend.strict_mkl() is (before is None and after is not None)
    assert backend.os.environ.get("MKL_CBWR") == after


def test_a_new_process_keeps_its_bits_at_one_and_two_threads_under_every_choice_of_the_gemm_table():
    """What lets a run join the core share, on the CPU this test runs on, under this CPU's own choice
    and under every row's libraries of the GEMM table: a fresh process that imports rnnlm (nothing set
    by hand: no MKL_CBWR, no OMP_NUM_THREADS) computes astra_alpha's training gradients (its model and
    batch) and a stateful pass whose products of one row reach MIN_ONEDNN_MACS (hidden 512) with the
    same bits at one thread and at two. On an Intel CPU it fails without `strict_mkl` (the weight
    gradients' sums split by thread)."""
    import os
    from rnnlm.compute import gemm_table

    choices = sorted({str(backend.cpu_gemm())} | {str(backend.Gemms(*row.libraries)) for row in gemm_table.load_table().values()})
    code = ("import sys, torch\n"
            "from rnnlm.compute import backend\n"
            "from rnnlm.evaluation.scoring import streamed_token_nll\n"
            "from rnnlm.models.config import ModelConfig\n"
            "from rnnlm.models.kinds import build_model\n"
            "from rnnlm.training.train import probe_gradients\n"
            "torch.manual_seed(0)\n"
            "model = build_model(ModelConfig(cell='gru', vocab_size=65, embd=64, hidden=128, layers=1))\n"
            "wide = build_model(ModelConfig(cell='gru', vocab_size=65, embd=64, hidden=512, layers=1)).eval()\n"
            "stream = torch.randint(65, (41,), generator=torch.Generator().manual_seed(1))\n"
            "for choice in sys.argv[1:]:\n"
            "    backend.use_gemm(backend.Gemms.parse(choice))\n"
            "    grads, losses = {}, {}\n"
            "    for n in (1, 2):\n"
            "        torch.set_num_threads(n)\n"
            "        grads[n] = [g.clone() for g in probe_gradients(model, 64, 128, 65)]\n"
            "        with torch.no_grad():\n"
            "            losses[n] = streamed_token_nll(wide, stream)\n"
            "    same = all(torch.equal(a, b) for a, b in zip(grads[1], grads[2])) and torch.equal(losses[1], losses[2])\n"
            "    print(choice, same)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("MKL_CBWR", "OMP_NUM_THREADS", backend.GEMM_ENV)}
    done = subprocess.run([sys.executable, "-c", code, *choices], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:-1] == [f"{choice} True" for choice in choices]
    assert backend.MIN_ONEDNN_MACS <= 512 * 3 * 512  # the wide model's hidden-side product of one row is of that kind


def test_every_process_of_the_machine_finds_one_share_whatever_its_tmpdir(tmp_path, monkeypatch):
    """A Slurm job, another user or a shell with its own TMPDIR: the share is the machine's, so each
    sees the others (with TMPDIR's folder, a run beside one such neighbour kept 5% of its speed)."""
    monkeypatch.delenv(threads.FOLDER_ENV, raising=False)
    folders = set()
    for tmpdir in (tmp_path / "a", tmp_path / "b"):
        tmpdir.mkdir()
        monkeypatch.setenv("TMPDIR", str(tmpdir))
        folders.add(threads.share_folder())
    (folder,) = folders
    assert folder.parent in threads.MACHINE_FOLDERS and folder.name == "rnnlm-cores"
    monkeypatch.setenv(threads.FOLDER_ENV, str(tmp_path / "own"))
    assert threads.share_folder() == tmp_path / "own"
    share = _quiet_share(tmp_path / "own", cores=2)
    share.join()
    assert (tmp_path / "own").stat().st_mode & 0o7777 == 0o1777  # any user may join, and remove only their own
    share.leave()


def _fake_proc(root, running: int, tasks: dict[int, list[tuple[str, int, int]]]):
    """A /proc of `tasks` (pid -> each thread's (state, flags, nice)) whose stat says `running` run,
    this process's own threads among them."""
    (root / "self/task/1").mkdir(parents=True)
    (root / "self/task/1/stat").write_text("1 (python) R 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0\n")
    (root / "stat").write_text(f"cpu  1 2 3\nprocs_running {running}\nprocs_blocked 0\n")
    for pid, threads_of in tasks.items():
        for i, (state, flags, nice) in enumerate(threads_of):
            task = root / str(pid) / "task" / str(pid + i)
            task.mkdir(parents=True)
            task.joinpath("stat").write_text(f"{pid + i} (a (b) c) {state} 1 1 1 0 -1 {flags} 0 0 0 0 0 0 0 0 "
                                             f"{20 + nice} {nice} 1 0\n")
    return root


def test_busy_threads_elsewhere_count_running_threads_at_this_priority_or_above(tmp_path):
    """What `refresh` adds to the share's members: running threads of other processes, not the
    kernel's, not those at a higher nice value, not the processes it is told to skip (the share's)."""
    import os

    mine = os.getpriority(os.PRIO_PROCESS, 0)
    proc = _fake_proc(tmp_path, running=9, tasks={
        100: [("R", 0, mine), ("R", 0, mine), ("S", 0, mine)],  # make -j: two running, one asleep
        200: [("R", 0, mine + 10)],  # nice'd: it runs only when ours wait
        300: [("R", threads.PF_KTHREAD, mine)],  # a kernel worker
        400: [("R", 0, mine)],  # a member of the share
    })
    assert threads.busy_elsewhere(frozenset({400}), proc) == 2
    quiet = _fake_proc(tmp_path / "quiet", running=1, tasks={100: [("R", 0, mine)]})
    assert threads.busy_elsewhere(frozenset(), quiet) == 0  # the machine runs only this process: nothing read


def test_a_busy_process_outside_the_share_takes_a_core_from_it_and_gives_it_back(tmp_path):
    counts = iter([0, 1, 1, 1, 0, 0, 0, 0])  # a moment of load, then load, then none again
    torch.set_num_threads(2)
    share = threads.CoreShare(tmp_path, cores=2, busy=lambda members: next(counts))
    share.join()  # counts the first 0
    share.check_with(lambda: [torch.ones(1)])
    assert [share.refresh(now=True) for _ in range(7)] == [2, 1, 1, 1, 1, 2, 2]  # by the median of the last 5
    share.leave()


def test_a_real_busy_loop_is_seen_running(tmp_path):
    """On this machine's own /proc: a busy Python loop at this process's priority is counted among
    the running threads (at least once in a few looks: the scheduler may have it waiting), and not
    when its process is skipped."""
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        seen = [threads.busy_elsewhere() for _ in range(20) if not time.sleep(0.05)]
        skipped = [threads.busy_elsewhere(frozenset({busy.pid})) for _ in range(5)]
        assert max(seen) >= 1 and max(seen) >= max(skipped)
    finally:
        busy.kill()
        busy.wait()
