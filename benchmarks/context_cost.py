"""What the context curve costs per model, against its arithmetic and against how it was batched before.

    PYTHONPATH=src python -m benchmarks.context_cost \\
        --markdown reports/speed/context-cost-NAME.md --json reports/speed/context-cost-NAME.json
    PYTHONPATH=src python -m benchmarks.context_cost --quick      # tiny shapes, seconds: checks it runs

The context curve (`rnnlm.evaluation.context`) predicts each of 2,000 targets from exactly c tokens,
for c = 1, 2, 4, ..., 1,024: 2,000 x 2,047 = 4.1 million tokens read whatever the model, most of
them in the long windows. Their arithmetic is fixed (a window starts from a zero state, so no two
windows share work); what batching and the output layer decide is how close to the machine's
matrix-product rate it runs. For each model (its real shapes, random weights: the cost does not
depend on them) and each c of `--lengths`, min(2,000, `--tokens` / c) windows (as many as the curve
has at short c, so that batches are as full as there) are scored two ways, side by side:

- `before`: every window's logits at every time step, 32,768 tokens per batch (how the curve was batched before);
- `now`: `context_nll` as the evaluate stage runs it (the last time step's logits alone, batches sized
  by the model's width, at least `MIN_WINDOWS` windows).

With `--batch-tokens N ...`, `context_nll` at N tokens a batch (at least `MIN_WINDOWS` windows) is
timed beside them, one contender per N: what another width of batch would give, on `--device` (a
GPU, where the batches sized for a CPU's caches leave thousands of short launches per window).

A row gives each one's microseconds per token (median over `--repeats` rounds), `now`'s speed-up,
the floating-point operations a token needs (the hidden-side products of every layer and the
input-side products of every layer but the first, which is a table lookup; the output layer once
per window) and the share of the machine's float32 product rate (a 1,024^3 product, measured in
the same run, `timing.measure_limit`) that `now` reaches.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from rnnlm.evaluation.context import MIN_WINDOWS, batch_tokens_for, context_nll
from rnnlm.evaluation.scoring import full_precision
from rnnlm.memory import keep_freed_memory
from rnnlm.models.kinds import LanguageModel, build_model

from benchmarks.timing import machine, machine_line, measure_limit, model_configs, side_by_side, write_report

TARGETS = 2000
"""The curve's targets per c (params.yaml, evaluate.context_targets)."""
RECURRENT_MODELS = ["rnn_alpha", "astra_alpha", "astra_beta", "astra_gamma", "scribe_alpha", "scribe_beta",
                    "scribe_gamma", "leviathan"]


@torch.no_grad()
def before(model: LanguageModel, ids: torch.Tensor, positions: torch.Tensor, c: int) -> torch.Tensor:
    """The context losses as the curve computed them before: 32,768 tokens per batch, every time step's
    logits, the last one read."""
    offsets = torch.arange(-c, 0)
    losses = []
    per_batch = max(1, 32768 // c)
    for start in range(0, positions.numel(), per_batch):  # windows a batch
        t = positions[start : start + per_batch]
        logits, _ = model(ids[t[:, None] + offsets])  # (b, c, V)
        losses.append(F.cross_entropy(full_precision(logits[:, -1]), ids[t], reduction="none"))
    return torch.cat(losses)


def step_flops(model: LanguageModel, c: int) -> float:
    """Floating-point operations per token of a window of c tokens (see the module's text)."""
    macs = 0
    for i, layer in enumerate(model.layers):
        macs += layer.cell.weight_hh.numel() + (layer.cell.weight_ih.numel() if i > 0 else 0)
    macs += model.head.weight.numel() / c
    return 2.0 * macs


def measure(args: argparse.Namespace) -> tuple[list[dict], float]:
    """One row per (model, c), and the machine's product rate in GFLOP/s."""
    device = torch.device(args.device)
    limit = max(measure_limit(args.limit_size, args.repeats, device).rates.values())
    rows = []
    for name, config in model_configs("params.yaml", args.models, args.shrink).items():
        torch.manual_seed(0)
        model = build_model(config).to(device).eval()
        ids = torch.randint(0, config.vocab_size, (max(args.lengths) + TARGETS * 8,),
                            generator=torch.Generator().manual_seed(1))
        for c in args.lengths:
            targets = min(TARGETS, max(1, args.tokens // c))
            positions = torch.arange(targets) * 8 + max(args.lengths)
            now = context_nll(model, ids, positions, c)
            contenders = {"before": lambda: before(model, ids.to(device), positions, c),
                          "now": lambda: context_nll(model, ids, positions, c)}
            for n in args.batch_tokens:
                contenders[f"{n} tokens"] = lambda n=n: context_nll(model, ids, positions, c, batch_tokens=n)
            for contender in contenders.values():  # the same losses, up to summation order
                torch.testing.assert_close(contender().float(), now.float(), rtol=1e-5, atol=1e-5)
            seconds = side_by_side(contenders, args.repeats, device)
            tokens = targets * c
            flops = step_flops(model, c)
            rows.append({"model": name, "c": c, "targets": targets,
                         "windows_per_batch": min(targets, max(MIN_WINDOWS, batch_tokens_for(model) // c)),
                         "before_us": seconds["before"] / tokens * 1e6, "now_us": seconds["now"] / tokens * 1e6,
                         "flops_per_token": flops, "now_gflops": flops * tokens / seconds["now"] / 1e9,
                         "other_us": {n: seconds[f"{n} tokens"] / tokens * 1e6 for n in args.batch_tokens}})
            others = "".join(f", {n} tokens a batch {us:.2f} us" for n, us in rows[-1]["other_us"].items())
            print(f"{name} c={c}: before {rows[-1]['before_us']:.2f} us, now {rows[-1]['now_us']:.2f} us per token"
                  f"{others} ({rows[-1]['now_gflops']:.0f} GFLOP/s of {limit:.0f})", flush=True)
    return rows, limit


def markdown(report: dict) -> str:
    lines = ["# What the context curve costs", "",
             f"Written by `benchmarks/context_cost.py` on {report['machine_line']}: per model (random weights, "
             f"real shapes) and context length c, min(2,000, {report['tokens']:,} / c) windows scored the way the curve was batched "
             f"before (every time step's logits, 32,768 tokens a batch) and now (the last time step's logits, batches by the "
             f"model's width), side by side, median of {report['repeats']} rounds. A full curve is 2,000 targets "
             f"for each c of 1, 2, ..., 1,024: 4.1 million tokens read. The machine's float32 product rate, measured "
             f"in the same run: {report['limit_gflops']:.0f} GFLOP/s.", "",
             "| model | c | windows | windows a batch | before, us per token | now | speed-up | FLOP per token "
             "| now, GFLOP/s | share of the product rate |" + "".join(f" {n:,} tokens a batch, us |" for n in
                                                                      report.get("batch_tokens", [])),
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + "---:|" * len(report.get("batch_tokens", []))]
    for r in report["rows"]:
        lines.append(f"| {r['model']} | {r['c']} | {r['targets']} | {r['windows_per_batch']} | {r['before_us']:.2f} | {r['now_us']:.2f} "
                     f"| {r['before_us'] / r['now_us']:.2f}x | {r['flops_per_token'] / 1e6:.3g} M "
                     f"| {r['now_gflops']:.0f} | {r['now_gflops'] / report['limit_gflops']:.0%} |"
                     + "".join(f" {us:.2f} |" for us in r.get("other_us", {}).values()))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=RECURRENT_MODELS)
    parser.add_argument("--lengths", nargs="+", type=int, default=[16, 128, 1024])
    parser.add_argument("--tokens", type=int, default=65536, help="tokens read per c at most (fewer windows at long c)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--shrink", type=int, default=1, help="divide the model widths by this")
    parser.add_argument("--limit-size", type=int, default=1024, help="the side of the product that sets the rate")
    parser.add_argument("--quick", action="store_true", help="tiny shapes and sizes: checks that it runs")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda on a GPU machine")
    parser.add_argument("--batch-tokens", nargs="*", type=int, default=[],
                        help="also time context_nll at these tokens a batch")
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.quick:
        args.models, args.lengths, args.tokens, args.repeats, args.shrink = ["astra_alpha"], [4, 32], 256, 1, 16
        args.limit_size = 128
    keep_freed_memory()
    info = machine(torch.device(args.device), keeps_memory=True)
    rows, limit = measure(args)
    report = {"machine": info, "machine_line": machine_line(info), "date": time.strftime("%Y-%m-%d"),
              "tokens": args.tokens, "repeats": args.repeats, "limit_gflops": limit, "rows": rows,
              "batch_tokens": args.batch_tokens}
    write_report(markdown(report), report, args.markdown, args.json)


if __name__ == "__main__":
    main()
