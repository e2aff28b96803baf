"""The CPU this process runs on, as Linux's /proc/cpuinfo describes it: vendor, model name,
generation (family, model, stepping), feature flags and whether it has AVX-512; and the memory the
machine has available. The GEMM choice (`rnnlm.compute.backend`) reads the CPU model (`cpu_kind`),
the vendor and AVX-512; the runs and benchmarks record the rest. Everything is "" (or empty) where /proc/cpuinfo cannot be read.
No PyTorch here: the `cell` stage's checks read it too (`rnnlm.preflight`).
"""

from __future__ import annotations

import os
from functools import cache


def available_memory() -> int | None:
    """The bytes the machine has available for a new allocation: Linux's MemAvailable, else the free
    pages; None where neither can be read."""
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


def cpu_vendor() -> str:
    """The CPU's vendor string ("GenuineIntel", "AuthenticAMD", ...), "" where it cannot be read."""
    return _cpuinfo("vendor_id")


def cpu_model() -> str:
    """The CPU's model name ("AMD EPYC", ...), "" where it cannot be read."""
    return _cpuinfo("model name")


def cpu_generation() -> str:
    """The CPU's family, model and stepping as /proc/cpuinfo numbers them ("family 6 model 207
    stepping 2"), "" where they cannot be read: they tell processor generations apart where a
    virtual machine names every CPU alike ("Intel(R) Xeon(R) Processor")."""
    numbers = {field: _cpuinfo(field) for field in ("cpu family", "model", "stepping")}
    if not all(numbers.values()):
        return ""
    return f"family {numbers['cpu family']} model {numbers['model']} stepping {numbers['stepping']}"


def cpu_kind() -> str:
    """The CPU model as the GEMM table names it: vendor, family and model ("AuthenticAMD family 25
    model 17"), the stepping left out (it does not change which library is faster); "" where they
    cannot be read."""
    fields = [_cpuinfo(field) for field in ("vendor_id", "cpu family", "model")]
    return f"{fields[0]} family {fields[1]} model {fields[2]}" if all(fields) else ""


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags ("avx2", "avx512f", ...), empty where they cannot be read."""
    return frozenset(_cpuinfo("flags").split())


AVX512 = frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq"})
"""The AVX-512 subsets that PyTorch's and oneDNN's AVX-512 kernels need."""


def has_avx512() -> bool:
    """Whether the CPU has AVX-512 (`AVX512`): then oneDNN's float32 matmul runs, and MKL does not
    use it on a CPU that is not Intel's."""
    return AVX512 <= cpu_flags()


@cache
def _cpuinfo(field: str) -> str:
    """The first value of `field` in /proc/cpuinfo (Linux), or ""."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.split(":", 1)[0].strip() == field:
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""
