"""A request too large for the machine's memory, said in one line instead of an allocator's traceback.

`fits_in_memory(what, device)` wraps the work a command was asked for (training a model, sampling
N texts). When PyTorch's allocator refuses an allocation inside it, on the CPU or on CUDA, it
raises `OutOfMemory`: what the request was, how many bytes the refused allocation asked for, and how
much memory the device had available. The allocation fails before anything is written, so nothing
is half-written (outputs are written at the end, atomically).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from rnnlm.errors import RnnlmError

_CPU_REFUSAL = re.compile(r"can't allocate memory: you tried to allocate (\d+) bytes")
_CUDA_REFUSAL = re.compile(r"Tried to allocate ([\d.]+) (B|KiB|MiB|GiB|TiB)")
_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


class OutOfMemory(RnnlmError):
    """The request needs more memory than the device has."""


def available_bytes(device: torch.device) -> int | None:
    """Free memory on `device`: CUDA's free bytes, or the CPU's MemAvailable (Linux); None if unknown."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


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
