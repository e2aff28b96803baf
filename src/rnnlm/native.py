"""The C++ code (`csrc/`), compiled on first use with PyTorch's own extension builder.

Three files, one module: `scan_loops.cpp` (the per-step loops of the scans and the one-layer
sampling steps; Python twin `rnnlm.scan_loops`), `generation.cpp` (a whole model's step, the choice
of the next token and the generation loop; Python twins in `rnnlm.stepping` and `rnnlm.sampling`)
and `bindings.cpp` (the Python names).

`compiled_for(tensor)` gives the compiled module for a CPU tensor when it is available, else None;
`scan_loops_for(tensor)` the loops to run a scan on `tensor`'s device: the compiled ones, or the
Python ones (the only ones on CUDA) with the same nine functions and signatures.

The first call compiles the C++ files with the machine's C++ compiler and ninja (about 35 s on two
cores) into PyTorch's extension cache (`~/.cache/torch_extensions`, or `TORCH_EXTENSIONS_DIR`);
later processes load the cached library in milliseconds. Build flags follow the vector
instructions PyTorch itself uses on this CPU (`torch.backends.cpu.get_cpu_capability()`). The
library is named after a digest of the source, those flags and the PyTorch it is built against,
so every copy of the repository with the same source (a DVC experiment's temporary workspace, a
test's scratch repository) loads the same build instead of compiling its own, a changed source
never loads a stale one, and two environments (two virtual environments, say) keep a build each.

On CUDA the loops come from `rnnlm.triton_loops` (products in cuBLAS, each step's elementwise work
in fused Triton kernels). `RNNLM_NATIVE=0` turns both compiled kinds off (the Python ones run
everywhere). If the build fails
(no compiler, say), one warning says why and the Python loops run: slower, the same numbers.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import warnings
from functools import cache
from pathlib import Path
from types import ModuleType

import torch

from rnnlm import scan_loops

# Joined in this order into one translation unit: each file uses what the ones before it define.
SOURCES = [Path(__file__).parent / "csrc" / name for name in ("scan_loops.cpp", "generation.cpp", "bindings.cpp")]

# The flags ATen compiles its own vectorised kernels with, per capability; "DEFAULT" is plain C++.
_CAPABILITY_FLAGS = {
    "AVX512": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma", "-DCPU_CAPABILITY_AVX512"],
    "AVX2": ["-mavx2", "-mfma", "-DCPU_CAPABILITY_AVX2"],
    "DEFAULT": [],
}


def enabled() -> bool:
    """False when RNNLM_NATIVE=0 asks for the Python loops only."""
    return os.environ.get("RNNLM_NATIVE", "1") != "0"


def _capability() -> str:
    capability = torch.backends.cpu.get_cpu_capability()
    return capability if capability in _CAPABILITY_FLAGS else "DEFAULT"


@cache
def compiled() -> ModuleType | None:
    """The compiled module, built or loaded once per process; None (after one warning) if the build fails."""
    from torch.utils import cpp_extension

    capability = _capability()
    source = "\n".join(path.read_text(encoding="utf-8") for path in SOURCES)
    cflags = ["-O3", "-fopenmp", f"-DCPU_CAPABILITY={capability}", *_CAPABILITY_FLAGS[capability]]
    # The build also depends on which PyTorch it compiles against (its headers' path is in the build
    # file): two environments get two builds instead of rebuilding one in turn.
    digest = hashlib.sha256("\0".join([source, *cflags, torch.__version__, torch.__file__]).encode()).hexdigest()[:12]
    try:
        _put_pip_ninja_on_path()
        return cpp_extension.load_inline(  # the source is copied into the build directory: one path per digest
            name=f"rnnlm_scan_loops_{capability.lower()}_{digest}",
            cpp_sources=[source],
            extra_cflags=cflags,
            extra_ldflags=["-fopenmp"],
            verbose=False,
        )
    except Exception as error:  # noqa: BLE001 - any build failure leaves the Python loops, which are correct
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        warnings.warn(f"rnnlm: C++ scan loops unavailable, using the Python ones ({first_line})", stacklevel=2)
        return None


def _put_pip_ninja_on_path() -> None:
    """PyTorch runs `ninja` from PATH; the pinned one from PyPI lives in the interpreter's scripts
    folder, which is not on PATH when a virtual environment's python is run without activating it."""
    if shutil.which("ninja") is None:
        try:
            import ninja
        except ImportError:
            return
        os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")


def compiled_for(tensor: torch.Tensor) -> ModuleType | None:
    """The compiled module for `tensor`'s device: on the CPU when enabled and built, else None."""
    if tensor.device.type == "cpu" and enabled():
        return compiled()
    return None


@cache
def triton_loops() -> ModuleType | None:
    """`rnnlm.triton_loops` (CUDA's fused loops), or None (after one warning) if Triton is missing."""
    try:
        from rnnlm import triton_loops as module
    except ImportError as error:
        warnings.warn(f"rnnlm: Triton unavailable, CUDA runs the ATen loops ({error})", stacklevel=2)
        return None
    return module


def scan_loops_for(tensor: torch.Tensor) -> ModuleType:
    """The scan loops for `tensor`'s device, the one place where they are chosen: the compiled C++
    ones on the CPU, the Triton-fused ones on CUDA, the Python ones (over ATen calls) otherwise:
    with RNNLM_NATIVE=0, on other devices, or when the build or Triton is unavailable."""
    if tensor.device.type == "cuda" and enabled():
        return triton_loops() or scan_loops
    return compiled_for(tensor) or scan_loops
