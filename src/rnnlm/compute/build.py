"""The compiled C++ module, built on first use with PyTorch's own extension builder.

Its sources are `rnnlm.compute.sources`'s units, each written to compile on its own against one
shared header, `cpp/kernels.h`: the shared kernels and the registry of cells (`cpp/kernels.cpp`),
each cell's loops (`cpp/NAME.cpp`, for the cell NAME of `rnnlm.models.cells`; each registers itself
under its cell's name, and a cell without one runs its Python loops), generation (`cpp/generation.cpp`: a
whole model's advance, the choice of the next token and the generation loop, dispatching each layer to
its cell through the registry) and the Python names (`cpp/bindings.cpp`). Nothing here imports model
code. `compiled()` builds or loads them once per process; which loops run where is decided in
`rnnlm.compute.backend`, not here.

The build compiles the units as one translation unit (a generated file that includes them in
order): most of a unit's compile time is parsing the same PyTorch headers, so one unit builds in a
fraction of the time the units take apart (`benchmarks/build_time.py` times both ways;
reports/speed/build-*.md); with more cores than units, the units apart may finish sooner. Any changed
source names a new build anyway (below), so ninja never had a single unit to recompile. The units
keep their private code apart for it: each cell's in its own namespace (kernels.h says how).

The first call compiles with the machine's C++ compiler and ninja (under a minute) into PyTorch's
extension cache (`~/.cache/torch_extensions`, or `TORCH_EXTENSIONS_DIR`); later processes load the
cached library in milliseconds. Build flags follow the vector instructions PyTorch itself uses on
this CPU (`torch.backends.cpu.get_cpu_capability()`). The library is named after a digest of the
sources and header, those flags and the PyTorch it is built against, so every copy of the repository
with the same source (a DVC experiment's temporary workspace, a test's scratch repository) loads the
same build instead of compiling its own, a changed source never loads a stale one, and two
environments (two virtual environments, say) keep a build each. If the build fails (no compiler,
say), one warning says why and the Python loops run: slower, the same numbers.

Two processes building at once take turns on PyTorch's lock file in the build folder, which PyTorch
waits on without end and without a word. A build killed half-way (Ctrl-C, a `timeout`) leaves that
file behind, so `_wait_for_other_build` waits here instead: it says once that it waits, and removes
a lock whose folder has been still for `STALE_LOCK_SECONDS` (the build takes about a minute).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
import warnings
from functools import cache
from pathlib import Path
from types import ModuleType

import torch

from rnnlm.compute.sources import HEADERS, units as sources

# The flags ATen compiles its own vectorised kernels with, per capability; "DEFAULT" is plain C++.
_CAPABILITY_FLAGS = {
    "AVX512": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma", "-DCPU_CAPABILITY_AVX512"],
    "AVX2": ["-mavx2", "-mfma", "-DCPU_CAPABILITY_AVX2"],
    "DEFAULT": [],
}


# A build folder with PyTorch's lock in it and no file changed for this long holds a dead build's lock.
STALE_LOCK_SECONDS = 300.0


def _capability() -> str:
    capability = torch.backends.cpu.get_cpu_capability()
    return capability if capability in _CAPABILITY_FLAGS else "DEFAULT"


@cache
def compiled() -> ModuleType | None:
    """The compiled module, built or loaded once per process; None (after one warning) if the build fails."""
    try:
        return build()
    except Exception as error:  # noqa: BLE001 - any build failure leaves the Python loops, which are correct
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        warnings.warn(f"rnnlm: C++ scan loops unavailable, using the Python ones ({first_line})", stacklevel=2)
        return None


def build(one_unit: bool = True) -> ModuleType:
    """Build the module, or load it from the cache, and import it; a failure raises. `one_unit=False`
    compiles each unit apart instead (ninja runs them side by side, as the build did before), under a
    name of its own ending `_apart`: what `benchmarks/build_time.py` compares."""
    from torch.utils import cpp_extension

    capability = _capability()
    files = sources()
    source = "\n".join(path.read_text(encoding="utf-8") for path in [*HEADERS, *files])
    cflags = ["-O3", "-fopenmp", f"-DCPU_CAPABILITY={capability}", *_CAPABILITY_FLAGS[capability]]
    # The build also depends on which PyTorch it compiles against (its headers' path is in the build
    # file): two environments get two builds instead of rebuilding one in turn.
    digest = hashlib.sha256("\0".join([source, *cflags, torch.__version__, torch.__file__]).encode()).hexdigest()[:12]
    _put_pip_ninja_on_path()
    name = f"rnnlm_native_{capability.lower()}_{digest}" + ("" if one_unit else "_apart")
    units = _staged([*HEADERS, *files], name)[len(HEADERS) :]
    build_dir = _build_root() / name
    build_dir.mkdir(parents=True, exist_ok=True)
    _wait_for_other_build(build_dir)
    return cpp_extension.load(
        name=name,
        sources=[str(_one_unit(units, name))] if one_unit else [str(unit) for unit in units],
        extra_cflags=cflags,
        extra_ldflags=["-fopenmp"],
        build_directory=str(build_dir),
        verbose=False,
    )


def _staged(files: list[Path], name: str) -> list[Path]:
    """Copies of `files` in one folder under the extension cache named after the build (each unit
    includes `kernels.h` by name, which this folder holds; the units' names differ, being files of one folder).
    Every copy of the repository then builds from the same paths: ninja sees nothing new and loads
    the library it built before."""
    root = _build_root() / f"{name}_sources"
    return [_write_if_changed(root / path.name, path.read_text(encoding="utf-8")) for path in files]


def _write_if_changed(path: Path, text: str) -> Path:
    """`path`, holding `text`: written only if it holds something else, and then atomically (a build
    running beside this one never reads half a file, and ninja sees an unchanged file as built)."""
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        partial.write_text(text, encoding="utf-8")
        partial.replace(path)
    return path


def _one_unit(units: list[Path], name: str) -> Path:
    """The file the compiler is given: `<name>.cpp` beside the staged `units`, including each of them
    by name, in their order (the build's name, rnnlm_native_..., is none of the units' names)."""
    lines = ["// Generated by rnnlm.compute.build: the module's units compiled as one translation unit.",
             *(f'#include "{unit.name}"' for unit in units)]
    return _write_if_changed(units[0].parent / f"{name}.cpp", "\n".join(lines) + "\n")


def _build_root() -> Path:
    """PyTorch's extension cache: `TORCH_EXTENSIONS_DIR`, else its per-user default. A build's
    folder (`<root>/<name>`) and its staged sources (`<root>/<name>_sources`) sit side by side; the
    name holds the digest of the PyTorch it builds against, so environments never share a folder."""
    from torch.utils import cpp_extension

    return Path(os.environ.get("TORCH_EXTENSIONS_DIR") or cpp_extension.get_default_build_root())


def _wait_for_other_build(build_dir: Path, stale_after: float = STALE_LOCK_SECONDS, poll: float = 1.0) -> None:
    """Return once `build_dir` holds no lock of PyTorch's builder (a file `lock`, present while
    another process compiles there). Waiting is said once, as a warning; a lock in a folder where no
    file has changed for `stale_after` seconds was left by a build that was killed, and is removed
    with a warning naming it (PyTorch itself would wait for it for ever)."""
    lock = build_dir / "lock"
    said = False
    while lock.exists():
        try:
            still = time.time() - max(entry.stat().st_mtime for entry in build_dir.iterdir())
        except (FileNotFoundError, ValueError):  # the lock (or a file) went as we looked: look again
            continue
        if still > stale_after:
            lock.unlink(missing_ok=True)
            warnings.warn(f"rnnlm: removed {lock}, left by a C++ build that stopped {still:.0f} s ago "
                          "(killed half-way); building again", stacklevel=3)
            return
        if not said:
            warnings.warn(f"rnnlm: waiting for another process's C++ build in {build_dir}", stacklevel=3)
            said = True
        time.sleep(poll)


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
