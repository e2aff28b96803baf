"""The one switch that decides where the arithmetic runs: which loops run the recurrences, and
which float32 GEMM library runs each matrix product on the CPU. Everything asks it.

In:  a device; for the loops a cell's `CellSpec`, for a product its tensor and size.
Out: `backend_for(device)`, the loops' backend:
     - "cpp": the compiled C++ loops (`rnnlm.compute.build`), on the CPU when the build succeeds;
     - "triton": each time step's elementwise work fused into Triton kernels, products in cuBLAS,
       on CUDA when Triton imports;
     - "python": the cells' Python loops over ATen calls: the reference, and everything else (other
       devices, `RNNLM_NATIVE=0`, a failed build, no Triton; each failure warns once);
     `loops(spec, device)`, a cell's loops there (a cell without loops of that backend gets its
     Python loops, with one note); `compiled_for(device, cell)`, the compiled module where "cpp" runs;
     `gemm_for(device)`, a `Gemms`: MKL or oneDNN (both exact float32) for the large products, the
     narrow ones and the narrow ones of one row: this CPU model's row of the GEMM table
     (`rnnlm.compute.gemm_table`), or `choose_gemm`'s vendor rule for a CPU it does not list
     (`unlisted_cpu_note` says so in one line);
     `onednn_for(tensor, macs, rows)`, whether one product runs through oneDNN.

The compiled code is told the narrow choices and both thresholds (`tell`) when it first loads and
whenever `use_gemm` changes the choice (tests and benchmarks). The same CPU model always gives the
same choice, read from committed figures and never timed at run time, so a machine's runs repeat
themselves bit for bit. Tests choose the loops by replacing
`backend_for` (fixtures in `tests/conftest.py`).
"""

from __future__ import annotations

import os
import warnings
from functools import cache
from types import ModuleType
from typing import NamedTuple

import torch

from rnnlm.compute import build, cpu, gemm_table
from rnnlm.errors import RnnlmError

MKL_STRICT = "AUTO,STRICT"
"""MKL's conditional numerical reproducibility, strict: its products give the same bits at any thread
count (Intel's documented promise), at a cost in speed that reports/speed/thread-bits-*.md measures."""


def strict_mkl() -> bool:
    """On an Intel CPU, put MKL in its strict mode (MKL_CBWR=`MKL_STRICT`) unless MKL_CBWR is set
    already, even empty: a mode set by hand is kept. Returns whether it set it. MKL reads the variable
    once, at its first call, so this module calls it when it is imported: it chooses every product's
    library, so it is imported before any product runs.
    Other CPUs are left as they are: there our products give the same bits at any count without it
    (the AMD runs of `benchmarks/queue_pair.py`), and strict mode would change their last bits."""
    if "MKL_CBWR" in os.environ or cpu.cpu_vendor() != "GenuineIntel":
        return False
    os.environ["MKL_CBWR"] = MKL_STRICT
    return True


_MKL_CBWR_BY_HAND = os.environ.get("MKL_CBWR")
"""MKL_CBWR as the environment set it before `strict_mkl` (None: not set)."""

strict_mkl()  # before MKL's first product, which fixes its mode for the process's life

CPU = torch.device("cpu")
GEMMS = ("mkl", "onednn")
GEMM_ENV = "RNNLM_GEMM"


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


def arithmetic(device: torch.device) -> dict[str, str]:
    """What sets a run's last bits on `device` beside its processor and its GEMMs (`gemm_for`): the
    loops that run the recurrences (`backend_for`) and, on the CPU, MKL's reproducibility mode as MKL
    reads it (MKL_CBWR, "" for MKL's default). What a run's training metrics record per machine."""
    return {"loops": backend_for(device), **({"mkl_cbwr": os.environ.get("MKL_CBWR", "")} if device.type == "cpu" else {})}


def chosen_by_hand(device: torch.device) -> dict[str, str]:
    """The settings of `device`'s arithmetic that this process's environment chose, not its machine:
    the loops that run (RNNLM_NATIVE=0, or a build that failed, runs the Python loops), MKL_CBWR when it
    was set before `strict_mkl` ("unset" otherwise) and RNNLM_GEMM ("" when unset). A resume file's key
    holds them, so a run never goes on under other ones; what the machine chooses (the GEMM rule,
    strict MKL on an Intel CPU) is recorded beside it instead, so that a run goes on on another CPU."""
    return {"loops": backend_for(device), "MKL_CBWR": "unset" if _MKL_CBWR_BY_HAND is None else _MKL_CBWR_BY_HAND,
            GEMM_ENV: os.environ.get(GEMM_ENV, "")}


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
        tell(module)
    return module


def has_compiled_loops(module: ModuleType, cell: str) -> bool:
    """Whether the compiled module holds the loops of `cell` (its .cpp file registered them)."""
    return hasattr(module, f"{cell}_forward")


@cache
def _missing(cell: str, what: str) -> None:
    warnings.warn(f"rnnlm: the cell {cell!r} has no {what}; it runs its Python loops there", stacklevel=3)


def loops(spec, device: torch.device):
    """The loops (forward, backward, advance) of the cell `spec` (a `CellSpec`) for `device`: the
    compiled functions its C++ file registered (`NAME_forward`, ...), the Triton loops its spec hands over,
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
        if spec.triton_loops is not None:
            return spec.triton_loops()
        _missing(spec.name, "Triton loops (no _triton.py module of its own)")
    return spec.python_loops


def compiled_for(device: torch.device, cell: str | None = None) -> ModuleType | None:
    """The compiled module when the "cpp" backend runs on `device` (and, given a `cell`, holds its
    loops), else None."""
    if backend_for(device) != "cpp":
        return None
    module = _compiled()
    return module if cell is None or has_compiled_loops(module, cell) else None


# ------------------------------------------------------------------ the GEMMs

MIN_ONEDNN_MACS = 2**19
"""Products with fewer multiply-adds stay on MKL even where oneDNN is chosen: a small product is
latency-bound, and oneDNN's call costs more than MKL's on its own (near 2^19 the two cross at batch
1). The one place this number lives."""

MIN_PARALLEL_NARROW_MACS = 2**19
"""A narrow product of the compiled loops (a scan's hidden side, every product of sampling one
token) with fewer multiply-adds runs on the calling thread, not the thread pool: the stateful pass and
sampling at batch 1 of the small models, the scans of small batches. Below it a parallel region costs
more than it saves (where the pool starts to pay on a machine: `benchmarks/two_processes.py
--crossover`, reports/speed/two-processes-*.md), and where another process holds the other core, each
region waits for a thread that is not running (docs/study-log.md). The thread count changes the last bits of a product's sum
for some shapes, so this rule, like the GEMM's, depends on shapes alone: a run repeats itself bit for
bit. The one place this number lives; the compiled code receives it with the GEMM choice."""


class Gemms(NamedTuple):
    """The float32 GEMM library ("mkl" or "onednn") of each kind of product."""

    large: str  # over all T*B rows of a sequence: input products, output layer, weight gradients (`products`)
    narrow: str  # of one time step or one advance, B rows: the scans' hidden side, every product of sampling
    one_row: str  # a narrow product of one row (B = 1: the stateful pass, sampling one stream) of at least
    # MIN_ONEDNN_MACS multiply-adds; a smaller one follows `narrow`

    @classmethod
    def parse(cls, text: str) -> Gemms:
        """"mkl", "onednn", "LARGE:NARROW" or "LARGE:NARROW:ONE_ROW", as RNNLM_GEMM takes them (a kind
        left out takes the library of the kind before it)."""
        parts = text.split(":")
        if len(parts) > 3 or any(part not in GEMMS for part in parts):
            raise RnnlmError(f"{GEMM_ENV}={text}: expected mkl, onednn, or two or three of them as "
                             "LARGE:NARROW[:ONE_ROW] (say mkl:onednn)")
        return cls(parts[0], parts[min(1, len(parts) - 1)], parts[-1])

    def __str__(self) -> str:
        """The shortest form `parse` reads back ("mkl", "mkl:onednn", "mkl:mkl:onednn"): the form
        RNNLM_GEMM takes, and what the training metrics record."""
        parts = [self.large, self.narrow, self.one_row]
        while len(parts) > 1 and parts[-1] == parts[-2]:
            parts.pop()
        return ":".join(parts)

    def without_one_row(self) -> Gemms:
        """This choice as a training step meets it (its products have many rows): one row as `narrow`."""
        return self._replace(one_row=self.narrow)

    def library(self, rows: int | None, macs: int) -> str:
        """The library of a product of `macs` multiply-adds: a large one (`rows` None) or a narrow one
        of `rows` rows (the rule the compiled code applies too: kernels.cpp, use_onednn)."""
        if rows is None:
            return self.large
        return self.one_row if rows == 1 and macs >= MIN_ONEDNN_MACS else self.narrow


_chosen: Gemms | None = None
"""The choice `use_gemm` made for this process, None for the machine's rule."""


def gemm_for(device: torch.device) -> Gemms | None:
    """The float32 GEMMs of the products on `device`: what `use_gemm` chose, else the machine's
    (`machine_gemm`, read once per process); None off the CPU (CUDA runs cuBLAS)."""
    if device.type != "cpu":
        return None
    return _chosen or _process_gemm()


def machine_gemm() -> Gemms:
    """This CPU's choice, RNNLM_GEMM as it is set now (`choose_gemm`)."""
    return _cpu_gemm(os.environ.get(GEMM_ENV, ""))


def cpu_gemm() -> Gemms:
    """This CPU's own choice, whatever RNNLM_GEMM says: its GEMM-table row, else the vendor rule (what
    the benchmarks weigh)."""
    return _cpu_gemm("")


@cache
def _process_gemm() -> Gemms:
    return machine_gemm()


def use_gemm(gemms: Gemms | None) -> Gemms | None:
    """Run the CPU's float32 products through `gemms` from now on, in this process, in the Python
    products and the compiled code at once (None: the machine's own choice again); returns the
    choice it replaces (None: the machine's), to hand back to it afterwards."""
    global _chosen
    previous, _chosen = _chosen, gemms
    if build.compiled.cache_info().currsize and build.compiled() is not None:  # loaded already: tell it
        tell(build.compiled())
    return previous


def tell(module: ModuleType) -> None:
    """Hand the compiled module the narrow products' GEMMs and both thresholds, read now (a benchmark may have
    changed a threshold before the module first loads)."""
    gemms = gemm_for(CPU)
    module.set_gemm(gemms.narrow, gemms.one_row, MIN_ONEDNN_MACS, MIN_PARALLEL_NARROW_MACS)


def onednn_for(tensor: torch.Tensor, macs: int, rows: int | None = None) -> bool:
    """Whether one float32 product on `tensor`, of `macs` multiply-adds, runs through oneDNN: on the
    CPU, with oneDNN chosen for its kind (`Gemms.library`: a large product if `rows` is None, else one
    time step's of `rows` rows), and at least MIN_ONEDNN_MACS multiply-adds. (A scan's products in the
    compiled loops, whose weight serves every time step, packed once, take their kind's library
    whatever their size: `NarrowProduct` in kernels.cpp.)"""
    gemms = gemm_for(tensor.device)
    if gemms is None or tensor.dtype != torch.float32 or macs < MIN_ONEDNN_MACS:
        return False
    return gemms.library(rows, macs) == "onednn"


def cbwr_is_strict(cbwr: str) -> bool:
    """Whether MKL_CBWR's value `cbwr` puts MKL in its strict mode (say "AUTO,STRICT")."""
    return "STRICT" in cbwr.upper().split(",")


@cache
def _cpu_gemm(requested: str) -> Gemms:
    return choose_gemm(cpu.cpu_vendor(), cpu.has_avx512(), requested, torch.backends.mkl.is_available(),
                       onednn_available(), cbwr_is_strict(os.environ.get("MKL_CBWR", "")),
                       gemm_table.row_for(cpu.cpu_kind()))


def unlisted_cpu_note(device: torch.device) -> str | None:
    """One line for a stage's log where the CPU's products follow the vendor rule because the GEMM
    table has no row for this CPU model, saying how to add it; None elsewhere (CUDA, a listed CPU,
    RNNLM_GEMM set by hand)."""
    if device.type != "cpu" or os.environ.get(GEMM_ENV) or gemm_table.row_for(cpu.cpu_kind()) is not None:
        return None
    return (f"note: this CPU ({cpu.cpu_kind() or 'model unknown'}) has no row in the GEMM table "
            f"(src/rnnlm/compute/gemm_table.json), so its products follow the vendor rule ({cpu_gemm()}); "
            "to choose them by measurement, run `python -m benchmarks.gemm_table --write` on it and commit the row")


def choose_gemm(vendor: str, avx512: bool, requested: str, has_mkl: bool, has_onednn: bool,
                strict: bool = False, row: gemm_table.Row | None = None) -> Gemms:
    """The choice, on its inputs: the CPU vendor (as /proc/cpuinfo names it), whether the CPU has
    AVX-512, RNNLM_GEMM ("" when unset), which of the two libraries this PyTorch has, whether MKL
    runs in its strict mode (`strict_mkl`) and the CPU model's row of the GEMM table (None where it
    has none). Each choice is timed side by side per machine in `reports/speed/`
    (`benchmarks/gemm_table.py`, `benchmarks/speed.py --gemm-choices`; one-row products:
    `benchmarks/thread_bits.py`):

    - RNNLM_GEMM `mkl`, `onednn`, `LARGE:NARROW` or `LARGE:NARROW:ONE_ROW` (say `mkl:onednn`), if set
      (anything else is refused);
    - the row's libraries, chosen from the figures it records;
    - without a row, the vendor rule, written on the first CPUs measured (it chose the slower
      library for the large products on the first new one, the Zen 2 of issue #102):
      - an Intel CPU: MKL for the large and the narrow products, Intel's own library; for the
        narrow products of one row, oneDNN where MKL runs strict, which makes MKL slow at one row
        (`reports/speed/thread-bits-one-row-*.md`) while oneDNN's keeps the same bits at any
        thread count too;
      - another vendor's CPU with AVX-512: oneDNN for all, as MKL does not use AVX-512 there and
        oneDNN does;
      - another vendor's CPU without AVX-512: MKL for the large products, oneDNN for the narrow
        ones (oneDNN's matmul also refuses float32 there: `rnnlm.compute.products` copies);
    - a library this PyTorch lacks: the other one."""
    if requested:
        preferred = Gemms.parse(requested)
    elif row is not None:
        preferred = Gemms(*row.libraries)
    elif vendor == "GenuineIntel":
        preferred = Gemms("mkl", "mkl", "onednn" if strict else "mkl")
    elif avx512:
        preferred = Gemms("onednn", "onednn", "onednn")
    else:
        preferred = Gemms("mkl", "onednn", "onednn")
    available = {"mkl": has_mkl, "onednn": has_onednn}
    return Gemms(*(name if available[name] else "onednn" if has_onednn else "mkl" for name in preferred))


@cache
def onednn_available() -> bool:
    """Whether this PyTorch has oneDNN and its linear op."""
    try:
        torch.ops.mkldnn._linear_pointwise  # noqa: B018 - the op the products call
    except (AttributeError, RuntimeError):
        return False
    return torch.backends.mkldnn.is_available()


@cache
def onednn_matmul_available() -> bool:
    """Whether oneDNN's matmul as PyTorch exposes it (`at::native::mkldnn_matmul`, which reads a
    transposed operand in place) takes float32 on this CPU: on x86 PyTorch asks for AVX-512 (bw, vl,
    dq) or AVX-NE-CONVERT even for float32, and refuses it elsewhere."""
    return onednn_available() and (cpu.has_avx512() or "avx_ne_convert" in cpu.cpu_flags())
