"""The C++ translation units of the compiled module, without PyTorch: all of them in `cpp/`, beside
this file, so what the build compiles is compute's own and nothing has to hand it sources.

In:  nothing; the files of `cpp/`.
Out: `units()`, the files to compile in their build order; `cell_units()`, the cells' compiled loops
     among them (every `.cpp` of `cpp/` but the three below, `NAME.cpp` for the cell `NAME`, which
     registers its loops in the C++ registry of cells under that name); `HEADERS`, the header they
     all include by name (the build copies every unit into one folder).

The compute units: `kernels.cpp` (the shared kernels and the registry of cells), `generation.cpp`
(the generation loop, which finds each layer's cell in that registry) and `bindings.cpp` (the
Python names).
"""

from __future__ import annotations

from pathlib import Path

CPP = Path(__file__).parent / "cpp"
HEADERS = [CPP / "kernels.h"]
COMPUTE_UNITS = ("kernels.cpp", "generation.cpp", "bindings.cpp")


def cell_units() -> list[Path]:
    """Each cell's compiled loops, `cpp/NAME.cpp`, in name order."""
    return sorted(path for path in CPP.glob("*.cpp") if path.name not in COMPUTE_UNITS)


def units() -> list[Path]:
    """The files to compile: the shared kernels, the cells' loops (in name order), generation, the bindings."""
    return [CPP / "kernels.cpp", *cell_units(), CPP / "generation.cpp", CPP / "bindings.cpp"]


def cell_unit(cell: str) -> Path:
    """The file of the compiled loops of `cell` (it may not exist: a cell without compiled loops)."""
    return CPP / f"{cell}.cpp"
