"""How long the compiled module takes to build from an empty cache: its units compiled as one
translation unit (what `rnnlm.compute.build` does) against each unit compiled apart, ninja running
them side by side (what the build did before).

    python -m benchmarks.build_time --markdown reports/speed/build-NAME.md --json reports/speed/build-NAME.json

Each build runs in a process of its own with an empty extension cache (a temporary
TORCH_EXTENSIONS_DIR): the two ways in turn, round after round (`--rounds`), so that whatever else
the machine does falls on both alike. A row gives the median wall seconds and the median CPU seconds
of the build with its compilers (user + system of the process and its children), and the ratio of
the units apart to one unit. With more cores than units, ninja's compiles side by side can finish
sooner than one unit alone does: the wall ratio says which way wins on this machine, the CPU ratio
what the shared headers cost. The machine should be otherwise idle.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from rnnlm.compute import cpu

from benchmarks.timing import write_report

WAYS = {"one unit": True, "units apart": False}
"""The row's name -> `rnnlm.compute.build.build`'s `one_unit`."""


def build_once(one_unit: bool) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one build in a fresh process with an empty extension cache;
    RuntimeError with the build's last line when it fails."""
    cache = Path(tempfile.mkdtemp(prefix="rnnlm-build-"))
    code = ("import rnnlm.models.cells\n"  # adds the cells' units before the build
            "from rnnlm.compute import build\n"
            f"build.build(one_unit={one_unit})\n")
    try:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", code], env={**os.environ, "TORCH_EXTENSIONS_DIR": str(cache)},
                              capture_output=True, text=True)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    if done.returncode != 0:
        last = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
        raise RuntimeError(f"the build ({'one unit' if one_unit else 'units apart'}) failed: {last}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def markdown(figures: dict) -> str:
    """The report: the machine, then a row per way and the ratios."""
    rows = figures["ways"]
    one, apart = rows["one unit"], rows["units apart"]
    lines = [
        "# The compiled module's build from an empty cache: one unit against units apart",
        "",
        f"{figures['machine_line']} · {figures['compiler']} · compiles at once: {figures['jobs']} · "
        f"medians of {figures['rounds']} rounds, the two ways in turn",
        "",
        "| build | wall (s) | CPU (s) | every round's wall (s) |",
        "|---|---:|---:|---|",
        *(f"| {way} | {row['wall_s']:.1f} | {row['cpu_s']:.1f} | {', '.join(f'{s:.1f}' for s in row['walls'])} |"
          for way, row in rows.items()),
        "",
        f"Units apart against one unit: {apart['wall_s'] / one['wall_s']:.2f}x the wall time, "
        f"{apart['cpu_s'] / one['cpu_s']:.2f}x the CPU time.",
    ]
    return "\n".join(lines) + "\n"


def machine_line() -> str:
    """The date, the CPU (model, vendor and generation, AVX-512 or not, cores) and the PyTorch built against."""
    vendor = " ".join(filter(None, [cpu.cpu_vendor(), cpu.cpu_generation()]))
    return (f"{time.strftime('%Y-%m-%d')} · {cpu.cpu_model()} ({vendor}, {'with' if cpu.has_avx512() else 'no'} "
            f"AVX-512), {os.cpu_count()} cores · torch {torch.__version__}")


def _compiler() -> str:
    """The first line of the C++ compiler's `--version` (PyTorch's builder runs `$CXX`, else c++)."""
    try:
        done = subprocess.run([os.environ.get("CXX", "c++"), "--version"], capture_output=True, text=True)
        return done.stdout.splitlines()[0] if done.returncode == 0 and done.stdout else "unknown compiler"
    except OSError:
        return "no C++ compiler"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="rounds of both builds (each a minute or more)")
    parser.add_argument("--markdown", type=Path, help="write the report here too")
    parser.add_argument("--json", type=Path, help="write the figures here as JSON")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds {args.rounds}: expected at least one round")
    times: dict[str, list[tuple[float, float]]] = {way: [] for way in WAYS}
    for round_number in range(1, args.rounds + 1):
        for way, one_unit in WAYS.items():
            times[way].append(build_once(one_unit))
            print(f"round {round_number}: {way} built in {times[way][-1][0]:.1f} s", file=sys.stderr, flush=True)
    figures = {
        "machine_line": machine_line(), "compiler": _compiler(),
        "jobs": os.environ.get("MAX_JOBS") or f"{(os.cpu_count() or 1) + 2}, ninja's default", "rounds": args.rounds,
        "ways": {way: {"wall_s": statistics.median(w for w, _ in runs), "cpu_s": statistics.median(c for _, c in runs),
                       "walls": [w for w, _ in runs], "cpus": [c for _, c in runs]} for way, runs in times.items()},
    }
    write_report(markdown(figures), figures, args.markdown, args.json)


if __name__ == "__main__":
    main()
