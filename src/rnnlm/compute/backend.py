"""The one switch that decides which loops run the recurrences. Everything asks it.

Backends:
- "cpp": the compiled C++ loops (`rnnlm.compute.build`): on the CPU, when the build succeeds;
- "triton": each step's elementwise work fused into Triton kernels, products in cuBLAS: on CUDA,
  when Triton imports;
- "python": the cells' Python loops over ATen calls: the reference, and what runs everywhere else
  (other devices, `RNNLM_NATIVE=0`, a failed build, no Triton; each failure warns once).

`backend_for(device)` decides; `loops(spec, device)` hands a cell its loops for a device (cells call
it through `rnnlm.models.cells.base.loops_for`): a cell without compiled or Triton loops of its own
gets its Python loops, with one note saying so; `compiled_for(device, cell)` gives the compiled
module (the whole-model sampling step and generation loop) where "cpp" runs and the cell has
compiled loops.

The float32 GEMM library each kind of product runs through on the CPU is chosen in
`rnnlm.compute.gemm_choice`; this module tells the compiled code that choice when it first loads it. Tests
choose a backend by replacing `backend_for` (fixtures in `tests/conftest.py`).
"""

from __future__ import annotations

import importlib
import os
import warnings
from functools import cache
from types import ModuleType

import torch

from rnnlm.compute import build, gemm_choice

CPU = torch.device("cpu")


def enabled() -> bool:
    """False when RNNLM_NATIVE=0 asks for the Python loops only."""
    return os.environ.get("RNNLM_NATIVE", "1") != "0"


def backend_for(device: torch.device) -> str:
    """The backend that runs the loops on `device`: "cpp", "triton" or "python" (see the module doc)."""
    if not enabled():
        return "python"
    if device.type == "cpu" and _compiled() is not None:
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


@cache
def _compiled() -> ModuleType | None:
    """The compiled module (None when it did not build), told the CPU's GEMM choice when first loaded."""
    module = build.compiled()
    if module is not None:
        gemm_choice.tell(module)
    return module


def has_compiled_loops(module: ModuleType, cell: str) -> bool:
    """Whether the compiled module holds the loops of `cell` (its .cpp file registered them)."""
    return hasattr(module, f"{cell}_forward")


@cache
def _missing(cell: str, what: str) -> None:
    warnings.warn(f"rnnlm: the cell {cell!r} has no {what}; it runs its Python loops there", stacklevel=3)


def _triton_loops(spec):
    """The Triton loops of the cell `spec`, or None when it has none (its module is absent)."""
    if spec.triton_module is None:
        return None
    try:
        return importlib.import_module(spec.triton_module).LOOPS
    except ModuleNotFoundError as error:
        if error.name != spec.triton_module:
            raise
        return None


def loops(spec, device: torch.device):
    """The loops (forward, backward, step) of the cell `spec` (a `CellSpec`) for `device`: the
    compiled functions its C++ file registered (`NAME_forward`, ...), its Triton module's `LOOPS`,
    or its Python loops (with one note when the backend has none for this cell); None for a cell
    with no loops at all (its layer runs it through autograd)."""
    if spec.python_loops is None:
        return None
    backend = backend_for(device)
    if backend == "cpp":
        module = _compiled()
        if has_compiled_loops(module, spec.name):
            return type(spec.python_loops)(*(getattr(module, f"{spec.name}_{f}") for f in spec.python_loops._fields))
        _missing(spec.name, "compiled loops (no .cpp file of its own)")
    elif backend == "triton":
        found = _triton_loops(spec)
        if found is not None:
            return found
        _missing(spec.name, "Triton loops (no _triton.py module of its own)")
    return spec.python_loops


def compiled_for(device: torch.device, cell: str | None = None) -> ModuleType | None:
    """The compiled module when the "cpp" backend runs on `device` (and, given a `cell`, holds its
    loops), else None."""
    if backend_for(device) != "cpp":
        return None
    module = _compiled()
    return module if cell is None or has_compiled_loops(module, cell) else None
