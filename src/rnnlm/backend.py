"""The one switch that decides which loops run the recurrences, per device. Everything asks it.

Backends:
- "cpp": the compiled C++ loops (`rnnlm.native`): on the CPU, when the build succeeds;
- "triton": each step's elementwise work fused into Triton kernels, products in cuBLAS: on CUDA,
  when Triton imports;
- "python": the cells' Python loops over ATen calls: the reference, and what runs everywhere else
  (other devices, `RNNLM_NATIVE=0`, a failed build, no Triton; each failure warns once).

`backend_for(device)` decides; `loops(...)` hands a cell its loops for a device (cells call it
through `rnnlm.models.cells.base.loops_for`); `compiled_for(device)` gives the compiled module
(the whole-model sampling step and generation loop) when "cpp" runs.

The float32 matrix products on the CPU go through one of the two GEMM libraries PyTorch ships,
MKL or oneDNN, both exact float32: `gemm_for(device)` decides, by this rule:

- `RNNLM_GEMM=mkl` or `RNNLM_GEMM=onednn` in the environment, if set (an unknown value is refused);
- else oneDNN on a CPU whose vendor is not Intel ("AuthenticAMD", "HygonGenuine", ...): MKL does not
  use AVX-512 there, and oneDNN's products ran at 2.2x MKL's rate on an AMD EPYC (`reports/speed/`);
- else MKL: on Intel processors, where it is fast and what this project always ran.
Either falls back to the other when the PyTorch build lacks it. The same vendor always gives the
same choice, so a machine's runs stay reproducible. `rnnlm.models.products` (the large products)
and the compiled loops (told through `set_gemm`) follow it.

Tests choose a backend by replacing `backend_for`, and a GEMM by replacing `gemm_for` (fixtures in
`tests/conftest.py`).
"""

from __future__ import annotations

import importlib
import os
import warnings
from functools import cache
from types import ModuleType

import torch

from rnnlm import native
from rnnlm.errors import RnnlmError

BACKENDS = ("python", "cpp", "triton")
GEMMS = ("mkl", "onednn")
GEMM_ENV = "RNNLM_GEMM"


def enabled() -> bool:
    """False when RNNLM_NATIVE=0 asks for the Python loops only."""
    return os.environ.get("RNNLM_NATIVE", "1") != "0"


def backend_for(device: torch.device) -> str:
    """The backend that runs the loops on `device`: "cpp", "triton" or "python" (see the module doc)."""
    if not enabled():
        return "python"
    if device.type == "cpu" and native.compiled() is not None:
        return "cpp"
    if device.type == "cuda" and triton_available():
        return "triton"
    return "python"


@cache
def triton_available() -> bool:
    """Whether Triton imports (it warns once when it does not: CUDA then runs the Python loops)."""
    try:
        import triton  # noqa: F401
    except ImportError as error:
        warnings.warn(f"rnnlm: Triton unavailable, CUDA runs the ATen loops ({error})", stacklevel=2)
        return False
    return True


def loops(spec, device: torch.device):
    """The loops (forward, backward, step) of the cell `spec` (a `CellSpec`) for `device`: the
    compiled functions its C++ file registered (`NAME_forward`, ...), its Triton module's `LOOPS`,
    or its Python loops."""
    backend = backend_for(device)
    if backend == "cpp":
        module = native.compiled()
        module.set_gemm(gemm_for(device))
        return type(spec.python_loops)(*(getattr(module, f"{spec.name}_{f}") for f in spec.python_loops._fields))
    if backend == "triton":
        return importlib.import_module(spec.triton_module).LOOPS
    return spec.python_loops


def compiled_for(device: torch.device) -> ModuleType | None:
    """The compiled module when the "cpp" backend runs on `device` (its GEMM set), else None."""
    if backend_for(device) != "cpp":
        return None
    module = native.compiled()
    module.set_gemm(gemm_for(device))
    return module


def gemm_for(device: torch.device) -> str | None:
    """The float32 GEMM of the products on `device`: "mkl" or "onednn" on the CPU (the rule in the
    module doc), None elsewhere (CUDA runs cuBLAS)."""
    if device.type != "cpu":
        return None
    return _cpu_gemm(os.environ.get(GEMM_ENV, ""))


@cache
def _cpu_gemm(requested: str) -> str:
    return choose_gemm(cpu_vendor(), requested, torch.backends.mkl.is_available(), onednn_available())


def choose_gemm(vendor: str, requested: str, has_mkl: bool, has_onednn: bool) -> str:
    """The rule, on its inputs: the CPU vendor (as /proc/cpuinfo names it), RNNLM_GEMM ("" when
    unset) and which of the two libraries this PyTorch has."""
    if requested and requested not in GEMMS:
        raise RnnlmError(f"{GEMM_ENV}={requested}: expected one of {', '.join(GEMMS)}")
    preferred = requested or ("mkl" if vendor == "GenuineIntel" else "onednn")
    available = {"mkl": has_mkl, "onednn": has_onednn}
    if available[preferred]:
        return preferred
    return "onednn" if preferred == "mkl" and has_onednn else "mkl"


def onednn_available() -> bool:
    """Whether this PyTorch has oneDNN and its linear op."""
    try:
        torch.ops.mkldnn._linear_pointwise  # noqa: B018 - the op the products call
    except (AttributeError, RuntimeError):
        return False
    return torch.backends.mkldnn.is_available()


def cpu_vendor() -> str:
    """The CPU's vendor string ("GenuineIntel", "AuthenticAMD", ...), "" where it cannot be read."""
    return _cpuinfo("vendor_id")


def cpu_model() -> str:
    """The CPU's model name ("AMD EPYC", ...), "" where it cannot be read."""
    return _cpuinfo("model name")


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
