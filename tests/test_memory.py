"""Freed memory kept for reuse (`rnnlm.memory.keep_freed_memory`): a large block freed and asked for
again stops costing the kernel's page faults. Each case runs in its own Python process, since the
setting holds for the whole process."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                                reason="the setting is glibc's")

BLOCK_PAGES = 2**24 * 4 // 4096  # a 64 MiB float32 tensor, in 4 KiB pages

ROUNDS = """
import ctypes, resource, sys, torch
from rnnlm.memory import keep_freed_memory
ctypes.CDLL(None).prctl(41, 1, 0, 0, 0)  # PR_SET_THP_DISABLE: 4 KiB pages, so faults count pages wherever THP is on
torch.set_num_threads(1)
took = keep_freed_memory(sys.argv[1] == "keep")

def faults_of_one_round():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(3):  # allocate, fill and free a 64 MiB tensor, three times
        block = torch.empty(2**24)
        block.fill_(1.0)
        del block
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

print(took, *[faults_of_one_round() for _ in range(8)])
"""


def _faults_per_round(mode: str) -> tuple[bool, list[int]]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")}
    for name in ("MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES"):
        env.pop(name, None)
    out = subprocess.run([sys.executable, "-c", ROUNDS, mode], env=env, capture_output=True, text=True, timeout=120,
                         check=True).stdout.split()
    return out[0] == "True", [int(n) for n in out[1:]]


def test_kept_memory_is_reused_without_page_faults():
    took, faults = _faults_per_round("keep")
    assert took
    assert faults[0] >= BLOCK_PAGES  # the heap grows once, page by page
    assert max(faults[-3:]) < BLOCK_PAGES // 10  # then the freed blocks come back without the kernel


def test_given_back_memory_is_faulted_in_again_every_time():
    took, faults = _faults_per_round("give back")
    assert took
    assert min(faults[-3:]) >= 3 * BLOCK_PAGES * 9 // 10  # every block mapped and zero-filled afresh
