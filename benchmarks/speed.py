"""Training-step and sampling speed of our layers beside the study's step-by-step cell and PyTorch's.

    PYTHONPATH=src python -m benchmarks.speed            # the recurrent models, about 20 min on 2 cores
    PYTHONPATH=src python -m benchmarks.speed --quick    # tiny shapes, a few seconds: checks it runs
    PYTHONPATH=src python -m benchmarks.speed --models astra_beta astra_gamma --repeats 7
    PYTHONPATH=src python -m benchmarks.speed --only allocator --models leviathan --repeats 3
    PYTHONPATH=src python -m benchmarks.speed --gemm-choices --markdown reports/speed/cpu-NAME.md --json reports/speed/cpu-NAME.json

Everything is measured in this one process, side by side: for each model shape, the three
implementations are warmed up, then timed in turn, round after round, so that whatever else the
machine does falls on all of them alike. Reported numbers are medians over the rounds.

Training step: forward, cross-entropy, backward, gradient clipping, AdamW, on random tokens of the
model's batch and sequence length, in training mode (dropout on). For a cell with loops of its own,
"ours, autograd scan" is our step with each layer scanned through autograd over the cell's `recur`
instead (what a new cell without loops runs): what the loops buy. GFLOP/s counts 6 x (our model's
parameters) x tokens per step, the same work for every implementation, and is compared with the
machine's limit: a large float32 matrix product measured at the start through both GEMM libraries
PyTorch ships on the CPU, MKL (`torch.mm`, and `mkl::_mkl_linear` with its weight packed once) and
oneDNN (`mkldnn::_linear_pointwise`, plain and packed), each library's faster form, and the faster
of the two libraries. That fastest product is then timed again in each model's rounds, beside its
implementations, and the model's "% of the limit" is of that rate: a 2-core cloud machine's rate
drifts by 10-15% over a run, which a single figure taken at the start would put into the shares.
The header names the CPU (vendor, model, AVX-512 or not) and the libraries
`rnnlm.compute.backend` chose for our large and per-step products. Beside them, "products alone": only
the matrix products of our step (forward and backward, each through our library for its kind, the
hidden-side weights packed per sequence as the scans pack them), nothing else; "% of products
alone" says how close an implementation comes to that time. Peak memory is what a step
allocates on top of what was held before it (tensors only, from the profiler's allocation events
on the CPU, from the allocator's statistics on CUDA).

Sampling: stateful generation from a one-token prompt, sampling at temperature 1, for the
character models, in characters per second at batch 1 and at batch 64: ours through
`rnnlm.inference.generation.generate` (on the CPU, its compiled loop), the study's cell and PyTorch's layers
through a Python loop of their steps, picking as the study's code does (softmax, then
`torch.multinomial`). Beside them, "products
alone": only the matrix products one step of our model cannot avoid (each hidden-side matrix, each
input-side matrix above the first layer, the output layer), nothing else. No implementation that
does these products in float32 samples faster; at batch 1 they read every weight once per
character, so for the larger models they bound the rate by memory bandwidth. They run through the
same GEMM as ours. Then stateless sampling of one sample per character model: ours (the compiled loop
computes the logits after each token once, since they depend on that token alone) beside the same
advancer called for every token.

`--gemm-choices` (CPU) times our training step once more under every value of RNNLM_GEMM (MKL or
oneDNN for the large products and for the per-time-step ones), side by side, beside the choice that
`rnnlm.compute.backend`'s rule makes for this machine: the evidence that the rule picks the fastest.

The whole run keeps freed memory in the process's heap (`rnnlm.memory.keep_freed_memory`), as
the training and evaluation stages do, for every implementation alike; the header says so.
`--allocator` (CPU) times our training step and PyTorch's once more with glibc's default settings and
with freed memory kept, alternated call by call: what keeping it is worth to each. `--only PART...`
runs some parts alone (training, sampling, stateless-sampling, gemm-choices, allocator).

`--markdown PATH` and `--json PATH` write what is printed, and every figure of both tables (model,
implementation, ms per step, ratios, GFLOP/s, share of the limit; the sampling rates and ratios),
with the machine, to files (reports/speed/ keeps them).
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import replace
from pathlib import Path

import torch

from rnnlm.compute.device import resolve_device, set_float32_precision
from rnnlm.memory import keep_freed_memory
from rnnlm.models.cells import CELLS
from rnnlm.params import load_params

from benchmarks.allocator_speed import measure_allocator
from benchmarks.gemm_choices import measure_gemm_choices
from benchmarks.sampling_speed import measure_sampling, measure_stateless_sampling
from benchmarks.timing import (FULL, QUICK, Report, STUDY_MODELS, machine, machine_line, measure_limit, model_configs,
                    save_report)
from benchmarks.training_speed import measure_training


PARTS = ("training", "sampling", "stateless-sampling", "gemm-choices", "allocator")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny shapes and few rounds: checks that everything runs")
    parser.add_argument("--models", nargs="+", default=[*STUDY_MODELS, "rnn_alpha"], help="entries of params.yaml")
    parser.add_argument("--repeats", type=int, help="timed rounds per measurement (default 5, quick 2)")
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--only", nargs="+", choices=PARTS, metavar="PART",
                        help=f"measure these parts alone ({', '.join(PARTS)})")
    parser.add_argument("--gemm-choices", action="store_true",
                        help="CPU: also time our training step under every RNNLM_GEMM choice, beside the rule's")
    parser.add_argument("--allocator", action="store_true",
                        help="CPU: also time our training step and PyTorch's with freed memory given back and kept")
    parser.add_argument("--allow-tf32", action="store_true",
                        help="CUDA: let every implementation's float32 products use TF32 (default: exact float32)")
    parser.add_argument("--markdown", type=Path, help="also write the printed report to this file")
    parser.add_argument("--json", type=Path, help="also write every figure to this JSON file")
    args = parser.parse_args(argv)
    settings = QUICK if args.quick else FULL
    if args.repeats is not None:
        if args.repeats < 1:
            parser.error(f"--repeats {args.repeats}: expected a positive integer")
        settings = replace(settings, repeats=args.repeats)
    params = load_params(args.params)
    models = params.models
    recurrent = [name for name, entry in models.items() if entry.cell in CELLS]
    for name in args.models:
        if name not in recurrent:
            parser.error(f"--models {name}: expected a recurrent model of {args.params} ({', '.join(recurrent)})")
    device = resolve_device(args.device)
    precision = set_float32_precision(args.allow_tf32) if device.type == "cuda" else "ieee"
    configs = model_configs(args.params, args.models, settings.shrink)
    torch.manual_seed(0)

    parts = set(args.only or ("training", "sampling", "stateless-sampling"))
    parts |= {part for part, asked in (("gemm-choices", args.gemm_choices), ("allocator", args.allocator)) if asked}
    if device.type != "cpu":
        parts -= {"gemm-choices", "allocator"}
    keeps_memory = keep_freed_memory(True)  # as the training and evaluation stages run

    report = Report()
    info = machine(device, keeps_memory)
    report.say(f"# Speed{' (quick: shapes shrunk, numbers meaningless)' if args.quick else ''}\n")
    report.say(machine_line(info) + f" · float32 products: {'TF32 allowed' if precision == 'tf32' else 'exact'}\n")
    measured_limit = measure_limit(settings.matmul_size, settings.repeats, device)
    rates = measured_limit.rates
    limit = max(rates.values())
    report.say(f"float32 matrix product {settings.matmul_size}x{settings.matmul_size}, medians: " + ", ".join(
        f"{name} {rate:.1f} GFLOP/s ({100 * rate / limit:.0f}% of the faster)" for name, rate in rates.items()) + "\n")
    figures = {"machine": info, "settings": dataclasses.asdict(settings), "matmul_gflops": rates, "limit_gflops": limit}
    if "training" in parts:
        figures["training"] = measure_training(configs, settings, device, measured_limit, report)
    if "gemm-choices" in parts:
        figures["gemm_choices"] = measure_gemm_choices(configs, settings, device, report)
    if "allocator" in parts:
        if keeps_memory:
            figures["allocator"] = measure_allocator(configs, settings, device, report)
        else:
            report.say("The allocator comparison needs glibc's allocator (Linux); skipped.\n")
    if "sampling" in parts:
        figures["sampling"] = measure_sampling(configs, params, settings, device, report)
    if "stateless-sampling" in parts:
        figures["stateless_sampling"] = measure_stateless_sampling(configs, params, settings, device, report)
    save_report(report.text(), figures, args.markdown, args.json)  # printed as it was measured


if __name__ == "__main__":
    main()

