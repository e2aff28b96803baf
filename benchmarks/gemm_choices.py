"""`--gemm-choices`: our training step under every GEMM choice (RNNLM_GEMM's values), side by side,
beside the choice `rnnlm.compute.backend` makes for this machine (its row of the GEMM table, or the vendor
rule): the evidence that it picks the fastest. `benchmarks/gemm_table.py` makes a CPU model's row from
these timings."""

from __future__ import annotations

from collections.abc import Callable

import torch

from rnnlm.compute import backend
from rnnlm.models.config import ModelConfig
from rnnlm.reporting.markdown import table_head, table_row

from benchmarks.timing import Report, Settings, per_model_section, side_by_side
from benchmarks.training_speed import our_training_step


GEMM_CHOICES = ("mkl", "onednn", "mkl:onednn", "onednn:mkl")
"""Every value of RNNLM_GEMM a training step tells apart: one library for both kinds of its products,
or LARGE:NARROW (its products have many rows: the one-row kind is not there)."""


def under_gemm(choice: str, fn: Callable[[], object]) -> Callable[[], object]:
    """fn, run with the GEMM choice `choice` (as RNNLM_GEMM takes it), set through the library's own
    switch (`rnnlm.compute.backend.use_gemm`) and handed back after."""

    def run() -> object:
        previous = backend.use_gemm(backend.Gemms.parse(choice))
        try:
            return fn()
        finally:
            backend.use_gemm(previous)

    return run


def benchmark_gemm_choices(name: str, config: ModelConfig, settings: Settings, device: torch.device) -> dict:
    """Our training step at one model's shape under each GEMM choice, timed side by side, beside the
    machine's own choice (RNNLM_GEMM aside): which is fastest, and how far the machine's is from it
    (recorded as "rule", the key the committed reports use)."""
    generator = torch.Generator().manual_seed(0)
    data = torch.randint(config.vocab_size, (settings.batch, settings.seq_len + 1), generator=generator)
    tokens, targets = data[:, :-1].contiguous(), data[:, 1:].contiguous()
    contenders = {choice: under_gemm(choice, our_training_step(config, tokens, targets, device, graph=False)[1])
                  for choice in GEMM_CHOICES}
    medians = side_by_side(contenders, settings.repeats, device)
    chosen = str(backend.cpu_gemm().without_one_row())  # a training step has no product of one row
    fastest = min(medians, key=medians.get)
    return {"model": name, "ms_per_step": {c: 1e3 * t for c, t in medians.items()}, "rule": chosen,
            "fastest": fastest, "rule_share_of_fastest": medians[fastest] / medians[chosen]}


def gemm_choices_table(records: list[dict]) -> str:
    lines = table_head(["model", *(f"{c} ms/step" for c in GEMM_CHOICES), "this machine's choice", "fastest",
                        "its speed, share of the fastest"], "l" + "r" * len(GEMM_CHOICES) + "llr")
    for r in records:
        lines.append(table_row([r["model"], *(f"{r['ms_per_step'][c]:,.1f}" for c in GEMM_CHOICES), r["rule"],
                                r["fastest"], f"{100 * r['rule_share_of_fastest']:.0f}%"]))
    return "\n".join(lines)


def measure_gemm_choices(configs: dict[str, ModelConfig], settings: Settings, device: torch.device,
                         report: Report) -> list[dict]:
    """The GEMM section of `report`: each model's training step under every GEMM choice beside the
    machine's, its table written, its records returned."""
    return per_model_section(
        report, f"## Our training step under each GEMM choice (RNNLM_GEMM=LARGE:NARROW, medians of {settings.repeats})",
        configs, lambda name, config: benchmark_gemm_choices(name, config, settings, device), "compared GEMMs on",
        gemm_choices_table)

