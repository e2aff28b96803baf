"""The one switch that decides which loops run the recurrences, per device. Everything asks it.

Backends:
- "cpp": the compiled C++ loops (`rnnlm.native`): on the CPU, when the build succeeds;
- "triton": each step's elementwise work fused into Triton kernels, products in cuBLAS: on CUDA,
  when Triton imports;
- "python": the cells' Python loops over ATen calls: the reference, and what runs everywhere else
  (other devices, `RNNLM_NATIVE=0`, a failed build, no Triton; each failure warns once).

`backend_for(device)` decides; `loops(...)` hands a cell its loops for a device (cells call it
through `rnnlm.models.cells.base.loops_for`); `compiled_for(device)` gives the compiled module
(the whole-model sampling step and generation loop) when "cpp" runs. Tests choose a backend by
replacing `backend_for` (one fixture, `tests/conftest.py`).
"""

from __future__ import annotations

import importlib
import os
import warnings
from functools import cache
from types import ModuleType

import torch

from rnnlm import native

BACKENDS = ("python", "cpp", "triton")


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
        return type(spec.python_loops)(*(getattr(module, f"{spec.name}_{f}") for f in spec.python_loops._fields))
    if backend == "triton":
        return importlib.import_module(spec.triton_module).LOOPS
    return spec.python_loops


def compiled_for(device: torch.device) -> ModuleType | None:
    """The compiled module when the "cpp" backend runs on `device`, else None."""
    return native.compiled() if backend_for(device) == "cpp" else None

