"""What every speed benchmark shares: the settings, timing side by side, peak memory, the machine's
float32 matrix-product limit, the model shapes, the machine's description and the printed report.

Contenders are warmed up, then timed in turn, round after round (`side_by_side`), so that whatever
else the machine does falls on all of them alike; reported numbers are medians over the rounds.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NamedTuple

import torch

from rnnlm.compute import backend, cpu
from rnnlm.atomic import write_text_atomic
from rnnlm.models.config import ModelConfig
from rnnlm.params import load_params


CHAR_VOCAB = 65


STUDY_MODELS = ("astra_alpha", "astra_beta", "astra_gamma", "scribe_alpha", "scribe_beta", "scribe_gamma", "leviathan")


@dataclass(frozen=True)
class Settings:
    batch: int
    seq_len: int
    repeats: int
    matmul_size: int
    sample_tokens: int
    sample_batches: tuple[int, ...]
    shrink: int  # model widths are divided by this (1: the real shapes)


FULL = Settings(batch=64, seq_len=128, repeats=5, matmul_size=4096, sample_tokens=200, sample_batches=(1, 64), shrink=1)


QUICK = Settings(batch=4, seq_len=8, repeats=2, matmul_size=256, sample_tokens=4, sample_batches=(1, 4), shrink=16)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn: Callable[[], object], device: torch.device) -> float:
    """Seconds that one call of fn takes, the device's queue drained before and after."""
    synchronize(device)
    start = time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - start


@contextlib.contextmanager
def native_stderr_silenced():
    """Send what C++ writes to stderr (file descriptor 2) to /dev/null for the block: the profiler's
    library prints two lines at every start and stop (torch 2.13, no setting turns them off).
    Python's own errors are raised after the block, so they still show."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def peak_bytes(fn: Callable[[], object], device: torch.device) -> int:
    """The most tensor memory held during fn beyond what was held when it started."""
    if device.type == "cuda":
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        fn()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - before
    from torch.profiler import ProfilerActivity, profile

    with native_stderr_silenced(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    # Every allocation and free as its own event, in time order (the public event list folds them
    # into the operators that made them, which loses the timeline).
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]")
    held = peak = 0
    for _, nbytes in events:
        held += nbytes
        peak = max(peak, held)
    return peak


def side_by_side(contenders: dict[str, Callable[[], object]], repeats: int, device: torch.device) -> dict[str, float]:
    """Median seconds per call of each contender, timed in turn round after round after a warm-up
    (on CUDA five calls each: a graph step captures itself on its fourth, and kernels compile on
    their first)."""
    for fn in contenders.values():
        for _ in range(5 if device.type == "cuda" else 1):
            fn()
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, fn in contenders.items():
            times[name].append(timed(fn, device))
    return {name: statistics.median(t) for name, t in times.items()}


class Limit(NamedTuple):
    """The machine's float32 matrix-product rate, measured once at the start: GFLOP/s per library,
    and the fastest (library, form)'s product with its count of floating-point operations, timed
    again beside each model's implementations (`benchmark_training`)."""

    rates: dict[str, float]
    product: Callable[[], object]
    flops: float


def measure_limit(size: int, repeats: int, device: torch.device) -> Limit:
    """Median over repeats of one (size x size)^2 product timed in turn through each library: on
    the CPU MKL and oneDNN, each the faster of its two forms, plain (`torch.mm`; oneDNN's linear op)
    and with its weight packed once into the library's layout, as our scans pack theirs; on CUDA
    cuBLAS."""
    forms = limit_forms(size, device)
    medians = side_by_side(forms, max(3, repeats), device)
    flops = 2.0 * size**3
    rates: dict[str, float] = {}
    for (library, _), seconds in medians.items():
        rates[library] = max(rates.get(library, 0.0), flops / seconds / 1e9)
    return Limit(rates, forms[min(medians, key=medians.get)], flops)


def matmul_gflops(size: int, repeats: int, device: torch.device) -> dict[str, float]:
    """GFLOP/s per library of `measure_limit`."""
    return measure_limit(size, repeats, device).rates


def limit_forms(size: int, device: torch.device) -> dict[tuple[str, str], Callable[[], object]]:
    """(library, form) -> a closure doing one (size x size)^2 float32 product that way."""
    a, b = (torch.randn(size, size, device=device) for _ in range(2))
    if device.type != "cpu":
        return {("cuBLAS", "plain"): lambda: a @ b}
    forms = {("MKL", "plain"): lambda: a @ b}
    if torch.backends.mkl.is_available():
        packed_mkl = torch.ops.mkl._mkl_reorder_linear_weight(b, size)
        forms[("MKL", "packed")] = lambda: torch.ops.mkl._mkl_linear(a, packed_mkl, b, None, size)
    if backend.onednn_available():
        onednn, packed = torch.ops.mkldnn._linear_pointwise, torch.ops.mkldnn._reorder_linear_weight(b, size)
        forms[("oneDNN", "plain")] = lambda: onednn(a, b, None, "none", [], "")
        forms[("oneDNN", "packed")] = lambda: onednn(a, packed, None, "none", [], "")
    return forms


def shrunk(config: ModelConfig, factor: int) -> ModelConfig:
    return replace(config, embd=max(4, config.embd // factor), hidden=max(4, config.hidden // factor))


def model_configs(params_path: str, names: list[str], shrink: int) -> dict[str, ModelConfig]:
    params = load_params(params_path)
    configs = {}
    for name in names:
        entry = params.models[name]
        vocab = params.tokenizer.vocab_size if entry.tokens == "sentencepiece" else CHAR_VOCAB
        configs[name] = shrunk(entry.model_config(vocab), shrink)
    return configs


def machine(device: torch.device, keeps_memory: bool) -> dict[str, object]:
    """What the figures were measured on (`keeps_memory`: whether freed memory stays in the heap)."""
    where = {"gpu": torch.cuda.get_device_name()} if device.type == "cuda" else {
        "cpu_vendor": cpu.cpu_vendor() or platform.processor(), "cpu_model": cpu.cpu_model() or platform.machine(),
        "cpu_generation": cpu.cpu_generation(), "cores": os.cpu_count(), "avx512": cpu.has_avx512(), "gemm": str(backend.gemm_for(device)),
        "mkl_cbwr": os.environ.get("MKL_CBWR", ""), "freed_memory_kept": keeps_memory}
    return {"date": datetime.date.today().isoformat(), **where, "torch": torch.__version__,
            "threads": torch.get_num_threads(), "device": str(device)}


def save_report(text: str, figures: object, markdown: Path | None, json_path: Path | None) -> None:
    """A benchmark's report to `markdown` and its figures as JSON to `json_path`, where given (each
    written whole or not at all)."""
    if markdown:
        write_text_atomic(markdown, text)
    if json_path:
        write_text_atomic(json_path, json.dumps(figures, indent=2) + "\n")


def corpus_parser(doc: str, model: str = "astra_alpha") -> argparse.ArgumentParser:
    """The command line of a benchmark that trains on the real corpus: --corpus, --model, and where its
    report goes (--markdown, --json); the caller adds its own options."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, required=True, help="a local copy of Tiny Shakespeare")
    parser.add_argument("--model", default=model)
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--json", type=Path)
    return parser


def cpu_report(corpus: Path, keeps_memory: bool) -> dict[str, object]:
    """A CPU benchmark's report so far: its machine and date; exits in one line when `corpus` is no file."""
    if not corpus.is_file():
        sys.exit(f"error: --corpus {corpus}: no such file; expected a local copy of Tiny Shakespeare")
    report: dict[str, object] = {"machine": machine(torch.device("cpu"), keeps_memory=keeps_memory),
                                 "date": time.strftime("%Y-%m-%d")}
    report["machine_line"] = machine_line(report["machine"])
    return report


def write_report(text: str, figures: object, markdown: Path | None, json_path: Path | None) -> None:
    """`save_report`, after printing the report."""
    print(text)
    save_report(text, figures, markdown, json_path)


def machine_line(info: dict[str, object]) -> str:
    if "gpu" in info:
        where = str(info["gpu"])
    else:
        strict = backend.cbwr_is_strict(str(info.get("mkl_cbwr", "")))  # MKL_CBWR as the process ran (backend.strict_mkl)
        names = {"mkl": "MKL (strict)" if strict else "MKL", "onednn": "oneDNN"}
        kinds = backend.Gemms.parse(str(info["gemm"]))
        if len(set(kinds)) == 1:
            gemm = names[kinds.large]
        else:
            gemm = f"{names[kinds.large]} (large), {names[kinds.narrow]} (per step)"
            if kinds.one_row != kinds.narrow:
                gemm += f", {names[kinds.one_row]} (per step of one row)"
        vendor = " ".join(filter(None, [str(info["cpu_vendor"]), str(info.get("cpu_generation", ""))]))
        where = (f"{info['cpu_model']} ({vendor}, {'with' if info['avx512'] else 'no'} AVX-512), "
                 f"{info['cores']} cores · our products through {gemm} · freed memory "
                 f"{'kept' if info['freed_memory_kept'] else 'given back'}")
    return f"{info['date']} · {where} · torch {info['torch']}, {info['threads']} threads · device {info['device']}"


class Report:
    """What the benchmark prints, kept to be written to a file too."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def say(self, text: str) -> None:
        print(text, flush=True)
        self.lines.append(text)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def per_model_section(report: Report, heading: str, configs: dict[str, ModelConfig],
                      measure: Callable[[str, ModelConfig], dict], done: str,
                      table: Callable[[list[dict]], str]) -> list[dict]:
    """A report section: `heading`, then `measure(name, config)` of every model in turn (saying on
    stderr when each is `done`), then `table(records)` of the records it returned."""
    report.say(heading + "\n")
    records = []
    for name, config in configs.items():
        records.append(measure(name, config))
        print(f"  {done} {name}", file=sys.stderr, flush=True)
    report.say(table(records) + "\n")
    return records
