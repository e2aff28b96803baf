"""This CPU model's row of the GEMM table: each kind of product timed through MKL and oneDNN at the
shapes our models use, side by side, and the faster library chosen per kind.

    PYTHONPATH=src python -m benchmarks.gemm_table            # times and prints the row (about 5 min on 2 cores)
    PYTHONPATH=src python -m benchmarks.gemm_table --write --name "AMD EPYC, Zen 4" \\
        --markdown reports/speed/gemm-table-NAME.md --json reports/speed/gemm-table-NAME.json
    PYTHONPATH=src python -m benchmarks.gemm_table --quick    # tiny shapes, seconds: checks that it runs

- Large and narrow products: our training step of each model of `--models` (batch 64 x 128, the
  real shapes) under each of the four LARGE:NARROW choices, timed side by side
  (`gemm_choices.benchmark_gemm_choices`), each choice's milliseconds summed over the models. The
  fastest pair gives both libraries; each kind's two figures are the sums with the other kind held
  at its chosen library.
- Products of one row: the stateful pass (one stream at batch 1, as the evaluate stage scores the
  validation text) under each library for one row, the other kinds as chosen, timed side by side;
  milliseconds per token summed over the models (only products of at least MIN_ONEDNN_MACS
  multiply-adds follow this kind).

The process runs as a training run does: MKL in its strict mode on an Intel CPU, freed memory
kept. `--write` puts the row into src/rnnlm/compute/gemm_table.json in place of this CPU model's
(every other row kept; the file written whole or not at all); `--quick` never writes.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from dataclasses import replace
from pathlib import Path

import torch

from rnnlm.atomic import write_text_atomic
from rnnlm.compute import backend, cpu, gemm_table
from rnnlm.evaluation.scoring import streamed_token_nll
from rnnlm.memory import keep_freed_memory
from rnnlm.models.config import ModelConfig
from rnnlm.models.language_model import RecurrentLM
from rnnlm.reporting.markdown import table_head, table_row

from benchmarks.gemm_choices import measure_gemm_choices, under_gemm
from benchmarks.timing import (FULL, QUICK, Report, Settings, machine, machine_line, model_configs, save_report,
                    side_by_side)

CPU = torch.device("cpu")
DEFAULT_MODELS = ("astra_beta", "astra_gamma", "leviathan")
STREAM_TOKENS = 300
"""Tokens of each timed stateful pass (the first is the prompt)."""


def large_and_narrow(records: list[dict], models: list[str]) -> dict[str, gemm_table.KindChoice]:
    """The large and narrow kinds' choices from the training steps timed under each LARGE:NARROW
    choice (`records`: one per model, `benchmark_gemm_choices`'), summed over the models."""
    totals = {choice: sum(r["ms_per_step"][choice] for r in records) for choice in records[0]["ms_per_step"]}
    large, narrow, _ = backend.Gemms.parse(min(totals, key=totals.get))

    def total(large: str, narrow: str) -> float:
        return totals[str(backend.Gemms(large, narrow, narrow))]

    summed = f"our training step, ms, summed over {', '.join(models)}"
    return {"large": gemm_table.KindChoice(large, "ms", {lib: round(total(lib, narrow), 3) for lib in gemm_table.LIBRARIES},
                                           f"{summed}; narrow products through {narrow}"),
            "narrow": gemm_table.KindChoice(narrow, "ms", {lib: round(total(large, lib), 3) for lib in gemm_table.LIBRARIES},
                                            f"{summed}; large products through {large}")}


def one_row_ms(config: ModelConfig, large: str, narrow: str, settings: Settings, tokens: int) -> dict[str, float]:
    """Library -> the stateful pass's median milliseconds per token of a model of `config` (random
    weights), its products of one row through that library, the others through `large` and `narrow`."""
    torch.manual_seed(0)
    net = RecurrentLM(config).eval()
    stream = torch.randint(config.vocab_size, (tokens + 1,), generator=torch.Generator().manual_seed(2))  # (tokens + 1,)

    def passes(library: str):
        return under_gemm(str(backend.Gemms(large, narrow, library)), lambda: streamed_token_nll(net, stream))

    with torch.no_grad():
        medians = side_by_side({lib: passes(lib) for lib in gemm_table.LIBRARIES}, settings.repeats, CPU)
    return {lib: seconds / tokens * 1e3 for lib, seconds in medians.items()}


def one_row(configs: dict[str, ModelConfig], large: str, narrow: str, settings: Settings, tokens: int,
            report: Report) -> gemm_table.KindChoice:
    """The one-row kind's choice from the stateful pass of every model, summed, with a table of each."""
    report.say(f"## The stateful pass at batch 1 under each library for one row ({tokens} tokens, medians of "
               f"{settings.repeats}; large {large}, narrow {narrow})\n")
    per_model = {}
    for name, config in configs.items():
        per_model[name] = one_row_ms(config, large, narrow, settings, tokens)
        print(f"  timed the stateful pass of {name}", file=sys.stderr, flush=True)
    lines = table_head(["model", *(f"{lib} ms/token" for lib in gemm_table.LIBRARIES)], "l" + "r" * len(gemm_table.LIBRARIES))
    lines += [table_row([name, *(f"{ms[lib]:.3f}" for lib in gemm_table.LIBRARIES)]) for name, ms in per_model.items()]
    report.say("\n".join(lines) + "\n")
    figures = {lib: round(sum(ms[lib] for ms in per_model.values()), 3) for lib in gemm_table.LIBRARIES}
    timed = f"the stateful pass at batch 1, ms per token, summed over {', '.join(configs)}; large {large}, narrow {narrow}"
    return gemm_table.KindChoice(gemm_table.KindChoice("", "ms", figures, timed).faster(), "ms", figures, timed)


def row_table(row: gemm_table.Row) -> str:
    lines = table_head(["kind", "library", "mkl", "onednn", "unit", "timed"], "llrrll")
    for kind, choice in row.kinds.items():
        lines.append(table_row([kind, f"**{choice.library}**", *(f"{choice.figures[lib]:,.3f}" for lib in gemm_table.LIBRARIES),
                                choice.unit, choice.timed]))
    return "\n".join(lines)


def write_row(row: gemm_table.Row, path: Path = gemm_table.TABLE) -> None:
    """`row` into the table at `path` in place of its CPU model's, every other row kept."""
    rows = gemm_table.parse_table(path.read_text(encoding="utf-8"), str(path)) if path.exists() else {}
    write_text_atomic(path, gemm_table.dumps(rows | {row.cpu: row}))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny shapes and few rounds: checks that it runs")
    parser.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS), help="recurrent entries of params.yaml")
    parser.add_argument("--repeats", type=int, help="timed rounds per measurement (default 5, quick 2)")
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--name", help="what a reader calls this CPU in the table (default: its model name)")
    parser.add_argument("--write", action="store_true", help="put the row into the GEMM table")
    parser.add_argument("--table", type=Path, default=gemm_table.TABLE, help=argparse.SUPPRESS)  # tests write elsewhere
    parser.add_argument("--markdown", type=Path, help="also write the printed report to this file")
    parser.add_argument("--json", type=Path, help="also write the row and every figure to this JSON file")
    args = parser.parse_args(argv)
    if args.write and args.quick:
        parser.error("--write with --quick: the quick shapes' timings choose nothing; expected one of them")
    kind = cpu.cpu_kind()
    if args.write and not kind:
        parser.error("--write: this CPU's vendor, family and model cannot be read (/proc/cpuinfo); "
                     "expected a Linux x86 machine")
    settings = QUICK if args.quick else FULL
    if args.repeats is not None:
        if args.repeats < 1:
            parser.error(f"--repeats {args.repeats}: expected a positive integer")
        settings = replace(settings, repeats=args.repeats)
    configs = model_configs(args.params, args.models, settings.shrink)
    keep_freed_memory(True)  # as the training and evaluation stages run
    info = machine(CPU, True)
    report = Report()
    report.say(f"# The GEMM table's row for {kind or 'this CPU'}{' (quick: shapes shrunk, numbers meaningless)' if args.quick else ''}\n")
    report.say(machine_line(info) + "\n")
    records = measure_gemm_choices(configs, settings, CPU, report)
    kinds = large_and_narrow(records, list(configs))
    kinds["one_row"] = one_row(configs, kinds["large"].library, kinds["narrow"].library, settings,
                               4 if args.quick else STREAM_TOKENS, report)
    source = (f"benchmarks/gemm_table.py on this CPU model, {datetime.date.today().isoformat()}, "
              f"medians of {settings.repeats}")
    row = gemm_table.Row(kind, args.name or cpu.cpu_model() or "unknown", True, source, kinds)
    report.say("## The row\n")
    report.say(row_table(row) + "\n")
    if args.write:
        write_row(row, args.table)
        report.say(f"Written into {args.table} as the row of {kind}.\n")
    figures = {"machine": info, "settings": {"repeats": settings.repeats, "shrink": settings.shrink},
               "gemm_choices": records, "row": {kind: gemm_table.entry(row)}}
    save_report(report.text(), figures, args.markdown, args.json)


if __name__ == "__main__":
    main()
