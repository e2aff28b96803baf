"""Where a stage's time goes: wall and CPU seconds of the whole stage and of its named parts.

In:  the parts a stage marks (`with clock.part("context curve"): ...`).
Out: reports/timing/<stage>.json, written by the stage beside its outputs:

    {"stage": "evaluate", "wall_s": 41.2, "cpu_s": 80.9, "threads": 2,
     "parts": {"stateful pass": {"wall_s": 3.1, "cpu_s": 6.0}, ...}}

CPU seconds count every thread of the process (`time.process_time`), so cpu_s / wall_s is how many
cores a part kept busy. A part marked twice adds up. These files change on every run (timings), so
nothing that must repeat byte for byte (metrics, checkpoints) holds them; `benchmarks/stage_times.py`
gathers them into a table per model.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path

import torch

from rnnlm.atomic import write_text_atomic


class StageClock:
    """Started when made; `part(name)` times a block; `write(path)` records the whole stage so far."""

    def __init__(self, stage: str):
        self.stage = stage
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        self.parts: dict[str, dict[str, float]] = {}

    @contextlib.contextmanager
    def part(self, name: str) -> Iterator[None]:
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            spent = self.parts.setdefault(name, {"wall_s": 0.0, "cpu_s": 0.0})
            spent["wall_s"] += time.perf_counter() - wall
            spent["cpu_s"] += time.process_time() - cpu

    def record(self) -> dict[str, object]:
        return {"stage": self.stage, "wall_s": round(time.perf_counter() - self.wall, 3),
                "cpu_s": round(time.process_time() - self.cpu, 3), "threads": torch.get_num_threads(),
                "parts": {name: {k: round(v, 3) for k, v in spent.items()} for name, spent in self.parts.items()}}

    def write(self, path: str | Path) -> None:
        write_text_atomic(path, json.dumps(self.record(), indent=2) + "\n")


@contextlib.contextmanager
def part_of(clock: StageClock | None, name: str) -> Iterator[None]:
    """`clock.part(name)`, or nothing when there is no clock (library callers, tests)."""
    if clock is None:
        yield
    else:
        with clock.part(name):
            yield
