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
MKL or oneDNN, both exact float32. There are two kinds of product, and `gemm_for(device)` gives a
library for each (a `Gemms`):

- `large`: the products over all T*B rows of a sequence (each layer's input products, the output
  layer, the weight gradients: `rnnlm.models.products`), most of a training step's work;
- `step`: the products of one time step, B rows (the scans' hidden-side products, every product
  of the sampling step: the compiled loops, told through `set_gemm`, and the Python stepper).

The rule (`choose_gemm`), from the CPU's vendor and whether it has AVX-512:

- `RNNLM_GEMM=mkl`, `onednn`, or `LARGE:STEP` (say `mkl:onednn`), if set (anything else is refused);
- an Intel CPU: MKL for both. MKL is Intel's own and uses every instruction set there; on an
  Intel Xeon with AVX-512 it was the faster of the two for both kinds (4096^2: 298-339 against
  280-309 GFLOP/s; 64 rows by Leviathan's 1024 x 4096, packed: 282 against 260), and our training
  step with MKL for both was the fastest of the four choices or within 0.1% of it for every model
  in nine rounds (`reports/speed/gemm-choices-intel-xeon-avx512.md`; five rounds had put
  oneDNN:MKL ahead for astra_gamma, by the VM's noise);
- another vendor's CPU with AVX-512 (AMD Zen 4 and later): oneDNN for both. MKL does not use
  AVX-512 on such a CPU; oneDNN does (a 4096^2 product at 2.2x MKL's rate on an AMD EPYC);
- another vendor's CPU without AVX-512 (AMD Zen 2 and 3): MKL for the large products, oneDNN for
  the per-step ones. Both libraries run AVX2 there; MKL's large products were faster (4096^2: 145
  against 122 GFLOP/s on an AMD EPYC without AVX-512) and oneDNN's narrow ones (64 rows by Leviathan's
  1024 x 4096: 105 against 77-82; one row: 29 against 7-14). oneDNN's matmul, which reads a
  transposed operand in place, also refuses float32 without AVX-512 there (`rnnlm.models.products`
  then copies the operand).

Either library falls back to the other when the PyTorch build lacks it. The same CPU always gives
the same choice, so a machine's runs repeat themselves bit for bit.

Tests choose a backend by replacing `backend_for`, and a GEMM by replacing `gemm_for` (fixtures in
`tests/conftest.py`).
"""

from __future__ import annotations

import importlib
import os
import warnings
from functools import cache
from types import ModuleType
from typing import NamedTuple

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
        module.set_gemm(gemm_for(device).step)
        return type(spec.python_loops)(*(getattr(module, f"{spec.name}_{f}") for f in spec.python_loops._fields))
    if backend == "triton":
        return importlib.import_module(spec.triton_module).LOOPS
    return spec.python_loops


def compiled_for(device: torch.device) -> ModuleType | None:
    """The compiled module when the "cpp" backend runs on `device` (its GEMM set), else None."""
    if backend_for(device) != "cpp":
        return None
    module = native.compiled()
    module.set_gemm(gemm_for(device).step)
    return module


class Gemms(NamedTuple):
    """The float32 GEMM library ("mkl" or "onednn") of each kind of product (see the module doc)."""

    large: str  # the products over all T*B rows of a sequence
    step: str  # the products of one time step (B rows)

    def __str__(self) -> str:
        """"mkl", "onednn", or "LARGE:STEP" when the two differ: the form RNNLM_GEMM takes, and what
        the training metrics record."""
        return self.large if self.large == self.step else f"{self.large}:{self.step}"


def gemm_for(device: torch.device) -> Gemms | None:
    """The float32 GEMMs of the products on `device` (the rule in the module doc); None off the
    CPU (CUDA runs cuBLAS)."""
    if device.type != "cpu":
        return None
    return _cpu_gemm(os.environ.get(GEMM_ENV, ""))


@cache
def _cpu_gemm(requested: str) -> Gemms:
    return choose_gemm(cpu_vendor(), has_avx512(), requested, torch.backends.mkl.is_available(), onednn_available())


def choose_gemm(vendor: str, avx512: bool, requested: str, has_mkl: bool, has_onednn: bool) -> Gemms:
    """The rule, on its inputs: the CPU vendor (as /proc/cpuinfo names it), whether the CPU has
    AVX-512, RNNLM_GEMM ("" when unset) and which of the two libraries this PyTorch has."""
    if requested:
        parts = requested.split(":")
        if len(parts) > 2 or any(part not in GEMMS for part in parts):
            raise RnnlmError(f"{GEMM_ENV}={requested}: expected mkl, onednn, or two of them as LARGE:STEP "
                             "(say mkl:onednn)")
        preferred = Gemms(parts[0], parts[-1])
    elif vendor == "GenuineIntel":
        preferred = Gemms("mkl", "mkl")
    elif avx512:
        preferred = Gemms("onednn", "onednn")
    else:
        preferred = Gemms("mkl", "onednn")
    available = {"mkl": has_mkl, "onednn": has_onednn}
    return Gemms(*(name if available[name] else "onednn" if has_onednn else "mkl" for name in preferred))


def onednn_available() -> bool:
    """Whether this PyTorch has oneDNN and its linear op."""
    try:
        torch.ops.mkldnn._linear_pointwise  # noqa: B018 - the op the products call
    except (AttributeError, RuntimeError):
        return False
    return torch.backends.mkldnn.is_available()


def onednn_matmul_available() -> bool:
    """Whether oneDNN's matmul as PyTorch exposes it (`at::native::mkldnn_matmul`, which reads a
    transposed operand in place) takes float32 on this CPU: on x86 PyTorch asks for AVX-512 (bw, vl,
    dq) or AVX-NE-CONVERT even for float32, and refuses it elsewhere."""
    return onednn_available() and (has_avx512() or "avx_ne_convert" in cpu_flags())


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
