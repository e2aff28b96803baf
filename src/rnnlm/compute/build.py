"""The compiled C++ module, built on first use with PyTorch's own extension builder.

Its sources are real translation units, each compiling on its own against one shared header,
`cpp/kernels.h`; which files they are is `rnnlm.compute.sources`'s: the shared kernels and the
registry of cells (`cpp/kernels.cpp`), each cell's loops (`rnnlm/models/cells/NAME.cpp`, added by
that package; each registers itself under its cell's name, and a cell without one runs its Python
loops), generation (`cpp/generation.cpp`: a whole model's step, the choice of the next token and the
generation loop, dispatching each layer to its cell through the registry) and the Python names
(`cpp/bindings.cpp`). Nothing here imports model code. `compiled()` builds or loads them once per
process; which loops run where is decided in `rnnlm.compute.backend`, not here.

The first call compiles with the machine's C++ compiler and ninja (about a minute on two cores) into
PyTorch's extension cache (`~/.cache/torch_extensions`, or `TORCH_EXTENSIONS_DIR`); later processes
load the cached library in milliseconds. Build flags follow the vector instructions PyTorch itself
uses on this CPU (`torch.backends.cpu.get_cpu_capability()`). The library is named after a digest
of the sources and header, those flags and the PyTorch it is built against, so every copy of the
repository with the same source (a DVC experiment's temporary workspace, a test's scratch
repository) loads the same build instead of compiling its own, a changed source never loads a stale
one, and two environments (two virtual environments, say) keep a build each. If the build fails (no
compiler, say), one warning says why and the Python loops run: slower, the same numbers.
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

from rnnlm.compute.sources import HEADERS, freeze

# The flags ATen compiles its own vectorised kernels with, per capability; "DEFAULT" is plain C++.
_CAPABILITY_FLAGS = {
    "AVX512": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma", "-DCPU_CAPABILITY_AVX512"],
    "AVX2": ["-mavx2", "-mfma", "-DCPU_CAPABILITY_AVX2"],
    "DEFAULT": [],
}


def _capability() -> str:
    capability = torch.backends.cpu.get_cpu_capability()
    return capability if capability in _CAPABILITY_FLAGS else "DEFAULT"


@cache
def compiled() -> ModuleType | None:
    """The compiled module, built or loaded once per process; None (after one warning) if the build fails."""
    from torch.utils import cpp_extension

    capability = _capability()
    files = freeze()
    source = "\n".join(path.read_text(encoding="utf-8") for path in [*HEADERS, *files])
    cflags = ["-O3", "-fopenmp", f"-DCPU_CAPABILITY={capability}", *_CAPABILITY_FLAGS[capability]]
    # The build also depends on which PyTorch it compiles against (its headers' path is in the build
    # file): two environments get two builds instead of rebuilding one in turn.
    digest = hashlib.sha256("\0".join([source, *cflags, torch.__version__, torch.__file__]).encode()).hexdigest()[:12]
    try:
        _put_pip_ninja_on_path()
        name = f"rnnlm_native_{capability.lower()}_{digest}"
        return cpp_extension.load(
            name=name,
            sources=[str(path) for path in _staged([*HEADERS, *files], name)][len(HEADERS) :],
            extra_cflags=cflags,
            extra_ldflags=["-fopenmp"],
            verbose=False,
        )
    except Exception as error:  # noqa: BLE001 - any build failure leaves the Python loops, which are correct
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        warnings.warn(f"rnnlm: C++ scan loops unavailable, using the Python ones ({first_line})", stacklevel=2)
        return None


def _staged(files: list[Path], name: str) -> list[Path]:
    """Copies of `files` in one folder under the extension cache named after the build (each unit
    includes `kernels.h` by name, which this folder holds; `sources.add` keeps the names apart). Every copy of the repository then builds
    from the same paths: ninja sees nothing new and loads the library it built before."""
    from torch.utils import cpp_extension

    root = Path(os.environ.get("TORCH_EXTENSIONS_DIR") or cpp_extension.get_default_build_root()) / f"{name}_sources"
    staged = []
    for path in files:
        copy = root / path.name
        text = path.read_text(encoding="utf-8")
        if not copy.exists() or copy.read_text(encoding="utf-8") != text:
            copy.parent.mkdir(parents=True, exist_ok=True)
            partial = copy.with_name(f"{copy.name}.{os.getpid()}.tmp")
            partial.write_text(text, encoding="utf-8")
            partial.replace(copy)  # atomic: a build running beside this one never reads half a file
        staged.append(copy)
    return staged


def _put_pip_ninja_on_path() -> None:
    """PyTorch runs `ninja` from PATH; the pinned one from PyPI lives in the interpreter's scripts
    folder, which is not on PATH when a virtual environment's python is run without activating it.
    Where the package finds no folder of its own (BIN_DIR is "" in a venv over system packages), PATH
    is left as it is: an empty entry would mean the current folder."""
    if shutil.which("ninja") is None:
        try:
            import ninja
        except ImportError:
            return
        if ninja.BIN_DIR and (Path(ninja.BIN_DIR) / "ninja").exists():
            os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")
