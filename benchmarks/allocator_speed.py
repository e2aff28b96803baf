"""`--allocator`: our training step and PyTorch's with glibc's default allocator settings and with
freed memory kept (`rnnlm.memory.keep_freed_memory`), alternated call by call."""

from __future__ import annotations

from collections.abc import Callable

import torch

from rnnlm.memory import keep_freed_memory
from rnnlm.reporting.markdown import table_head, table_row
from rnnlm.models.config import ModelConfig

from benchmarks.references import TorchLM
from benchmarks.timing import Report, Settings, per_model_section, side_by_side
from benchmarks.training_speed import our_training_step, reference_training_step


ALLOCATOR_MODES = {"default": False, "kept": True}
"""glibc's default settings (large blocks mapped and unmapped), and freed memory kept in the heap."""


def under_allocator(keep: bool, fn: Callable[[], object]) -> Callable[[], object]:
    """fn, run with freed memory kept or given back (`keep_freed_memory(keep)` before each call)."""

    def run() -> object:
        keep_freed_memory(keep)
        return fn()

    return run


def benchmark_allocator(name: str, config: ModelConfig, settings: Settings, device: torch.device) -> dict:
    """Our training step and PyTorch's at one model's shape under both allocator modes, alternated call
    by call; afterwards the run goes on with freed memory kept."""
    generator = torch.Generator().manual_seed(0)
    data = torch.randint(config.vocab_size, (settings.batch, settings.seq_len + 1), generator=generator)
    tokens, targets = data[:, :-1].contiguous(), data[:, 1:].contiguous()
    steps = {"ours": our_training_step(config, tokens, targets, device, graph=False)[1],
             "PyTorch": reference_training_step(TorchLM(config).to(device).train(), tokens, targets)}
    contenders = {(impl, mode): under_allocator(keep, fn) for impl, fn in steps.items()
                  for mode, keep in ALLOCATOR_MODES.items()}
    medians = side_by_side(contenders, settings.repeats, device)
    keep_freed_memory(True)
    return {"model": name,
            "ms_per_step": {impl: {mode: 1e3 * medians[impl, mode] for mode in ALLOCATOR_MODES} for impl in steps},
            "speedup_kept": {impl: medians[impl, "default"] / medians[impl, "kept"] for impl in steps}}


def allocator_table(records: list[dict]) -> str:
    lines = table_head(["model", "implementation", "default ms/step", "kept ms/step", "kept, speed-up"], "llrrr")
    for r in records:
        for impl, ms in r["ms_per_step"].items():
            lines.append(table_row([r["model"], impl, f"{ms['default']:,.1f}", f"{ms['kept']:,.1f}",
                                    f"{r['speedup_kept'][impl]:.3f}×"]))
    return "\n".join(lines)


def measure_allocator(configs: dict[str, ModelConfig], settings: Settings, device: torch.device,
                      report: Report) -> list[dict]:
    """The allocator section of `report`: each model's training step with freed memory given back
    and kept, its table written, its records returned."""
    return per_model_section(
        report, f"## Training steps with freed memory given back (glibc's default) and kept, medians of {settings.repeats}",
        configs, lambda name, config: benchmark_allocator(name, config, settings, device),
        "compared allocator settings on", allocator_table)

