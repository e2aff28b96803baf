"""The process's memory: a request too large said in one line, and freed memory kept for reuse.

`fits_in_memory(what, device)` wraps the work a command was asked for (training a model, sampling
N texts). When PyTorch's allocator refuses an allocation inside it, on the CPU or on CUDA, it
raises `OutOfMemory`: what the request was, how many bytes the refused allocation asked for, and how
much memory the device had available. The allocation fails before anything is written, so nothing
is half-written (outputs are written at the end, atomically).

`keep_freed_memory()` tells glibc's allocator (Linux) to keep the memory a process frees for its
next allocations. By default glibc maps every block over 32 MiB afresh and gives it back to the
kernel when freed, so the scans' large arrays (Leviathan's gates: 128 x 64 x 4096 floats, 134 MB,
per layer and step) are zero-filled by the kernel page by page on every training step. The
training and evaluation stages call it; results do not change, only where the bytes come from.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform
import re
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from rnnlm.compute.cpu import available_memory
from rnnlm.errors import RnnlmError

_CPU_REFUSAL = re.compile(r"can't allocate memory: you tried to allocate (\d+) bytes")
_CUDA_REFUSAL = re.compile(r"Tried to allocate ([\d.]+) (B|KiB|MiB|GiB|TiB)")
_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


class OutOfMemory(RnnlmError):
    """The request needs more memory than the device has."""


def available_bytes(device: torch.device) -> int | None:
    """Free memory on `device`: CUDA's free bytes, or the machine's available memory; None if unknown."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    return available_memory()


def requested_bytes(message: str) -> int | None:
    """The size of the refused allocation, read from PyTorch's CPU or CUDA allocator message."""
    if match := _CPU_REFUSAL.search(message):
        return int(match.group(1))
    if match := _CUDA_REFUSAL.search(message):
        return int(float(match.group(1)) * _UNITS[match.group(2)])
    return None


def _gib(n: int | None) -> str:
    return "an unknown amount" if n is None else f"{n / 2**30:,.1f} GiB"


@contextmanager
def fits_in_memory(what: str, device: torch.device | str) -> Iterator[None]:
    """Run the block; an allocator's refusal inside it becomes one `OutOfMemory` line about `what`."""
    device = torch.device(device)
    try:
        yield
    except (torch.OutOfMemoryError, RuntimeError) as error:
        asked = requested_bytes(str(error))
        if asked is None and not isinstance(error, torch.OutOfMemoryError):
            raise  # another runtime error: a bug, keep its traceback
        raise OutOfMemory(f"{what} does not fit in memory: one allocation asked for {_gib(asked)}, "
                          f"the {device.type} has {_gib(available_bytes(device))} available; "
                          f"expected a smaller request") from None


# mallopt(3) parameters (glibc's malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_MMAP_MAX = -1, -3, -4
_GLIBC_MMAP_MAX = 65536  # glibc's default count of mapped blocks
_GLIBC_DYNAMIC_MMAP_THRESHOLD = 32 * 2**20  # where glibc's own threshold settles once large blocks are freed
_INT_MAX = 2**31 - 1


def keep_freed_memory(keep: bool = True) -> bool:
    """Keep (True) or give back (False) the memory this process frees. Returns whether the allocator
    took the setting: False, doing nothing, where the C library is not glibc.

    keep=True: no block is mapped on its own, and the heap is trimmed only when 2 GiB lie free at its
    top, so a freed block is reused by the next allocation of its size without the kernel's page
    faults; the process keeps about its peak memory until it exits (for a training or evaluation
    process, what its next step uses), more while the heap settles in its first steps.
    keep=False: glibc's settled default (blocks over 32 MiB mapped on their own and unmapped when
    freed, the heap trimmed past 64 MiB free at its top), for side-by-side measurements.
    """
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    settings = ([(_M_MMAP_MAX, 0), (_M_TRIM_THRESHOLD, _INT_MAX)] if keep else
                [(_M_MMAP_MAX, _GLIBC_MMAP_MAX), (_M_MMAP_THRESHOLD, _GLIBC_DYNAMIC_MMAP_THRESHOLD),
                 (_M_TRIM_THRESHOLD, 2 * _GLIBC_DYNAMIC_MMAP_THRESHOLD)])
    return all(mallopt(parameter, value) == 1 for parameter, value in settings)
