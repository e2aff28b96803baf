"""Training-step and sampling speed of our layers beside the study's step-by-step cell and PyTorch's.

    PYTHONPATH=src python benchmarks/speed.py            # the recurrent models, about 20 min on 2 cores
    PYTHONPATH=src python benchmarks/speed.py --quick    # tiny shapes, a few seconds: checks it runs
    PYTHONPATH=src python benchmarks/speed.py --models astra_beta astra_gamma --repeats 7
    PYTHONPATH=src python benchmarks/speed.py --only allocator --models leviathan --repeats 3
    PYTHONPATH=src python benchmarks/speed.py --gemm-choices --markdown reports/speed/cpu-NAME.md --json reports/speed/cpu-NAME.json

Everything is measured in this one process, side by side: for each model shape, the three
implementations are warmed up, then timed in turn, round after round, so that whatever else the
machine does falls on all of them alike. Reported numbers are medians over the rounds.

Training step: forward, cross-entropy, backward, gradient clipping, AdamW, on random tokens of the
model's batch and sequence length, in training mode (dropout on). GFLOP/s counts 6 x (our model's
parameters) x tokens per step, the same work for every implementation, and is compared with the
machine's limit: a large float32 matrix product measured at the start through both GEMM libraries
PyTorch ships on the CPU, MKL (`torch.mm`, and `mkl::_mkl_linear` with its weight packed once) and
oneDNN (`mkldnn::_linear_pointwise`, plain and packed), each library's faster form, and the faster
of the two libraries. That fastest product is then timed again in each model's rounds, beside its
implementations, and the model's "% of the limit" is of that rate: a 2-core cloud machine's rate
drifts by 10-15% over a run, which a single figure taken at the start would put into the shares.
The header names the CPU (vendor, model, AVX-512 or not) and the libraries
`rnnlm.backend` chose for our large and per-step products. Beside them, "products alone": only
the matrix products of our step (forward and backward, each through our library for its kind, the
hidden-side weights packed per sequence as the scans pack them), nothing else; "% of products
alone" says how close an implementation comes to that time. Peak memory is what a step
allocates on top of what was held before it (tensors only, from the profiler's allocation events
on the CPU, from the allocator's statistics on CUDA).

Sampling: stateful generation from a one-token prompt, sampling at temperature 1, for the
character models, in characters per second at batch 1 and at batch 64: ours through
`rnnlm.inference.sampling.generate` (on the CPU, its compiled loop), the study's cell and PyTorch's layers
through a Python loop of their steps, picking as the study's code does (softmax, then
`torch.multinomial`). Beside them, "products
alone": only the matrix products one step of our model cannot avoid (each hidden-side matrix, each
input-side matrix above the first layer, the output layer), nothing else. No implementation that
does these products in float32 samples faster; at batch 1 they read every weight once per
character, so for the larger models they bound the rate by memory bandwidth. They run through the
same GEMM as ours.

`--gemm-choices` (CPU) times our training step once more under every value of RNNLM_GEMM (MKL or
oneDNN for the large products and for the per-step ones), side by side, beside the choice that
`rnnlm.backend`'s rule makes for this machine: the evidence that the rule picks the fastest.

The whole run keeps freed memory in the process's heap (`rnnlm.memory.keep_freed_memory`), as
the training and evaluation stages do, for every implementation alike; the header says so.
`--allocator` (CPU) times our training step and PyTorch's once more with glibc's default settings and
with freed memory kept, alternated call by call: what keeping it is worth to each. `--only PART...`
runs some parts alone (training, sampling, gemm-choices, allocator).

`--markdown PATH` and `--json PATH` write what is printed, and every figure of both tables (model,
implementation, ms per step, ratios, GFLOP/s, share of the limit; the sampling rates and ratios),
with the machine, to files (reports/speed/ keeps them).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
import dataclasses
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from references import StepByStepLM, TorchLM, sample_like_the_study  # noqa: E402

from rnnlm.models.language_model import ModelConfig, RecurrentLM, config_from_params, count_parameters  # noqa: E402
from rnnlm.params import load_params  # noqa: E402
from rnnlm.inference.sampling import Decoding, generate, make_generator  # noqa: E402
from rnnlm.training.step import make_optimizer, make_training_step  # noqa: E402
from rnnlm.device import resolve_device, set_float32_precision  # noqa: E402
from rnnlm import backend  # noqa: E402
from rnnlm.atomic import write_text_atomic  # noqa: E402
from rnnlm.memory import keep_freed_memory  # noqa: E402
from rnnlm.models.products import linear, t_mm  # noqa: E402

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
        configs[name] = shrunk(config_from_params(entry, vocab), shrink)
    return configs


# ---------------------------------------------------------------------------------------------
# Training steps


def reference_training_step(model: nn.Module, tokens: Tensor, targets: Tensor):
    """A closure running one full training step of a reference model (logits = model(tokens)), with
    the optimizer ours uses (`make_optimizer`: fused AdamW), so that the ratios compare the layers."""
    optimizer = make_optimizer(model, 1e-3, 0.01, tokens.device, graph=False)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        logits = model(tokens)  # (B, T, V)
        F.cross_entropy(logits.flatten(0, 1), targets.flatten()).backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    return step


def our_training_step(config: ModelConfig, tokens: Tensor, targets: Tensor, device: torch.device, graph: bool):
    """The library's own training step (`rnnlm.training.step`) on a fresh model, eager or as a CUDA graph."""
    model = RecurrentLM(config).to(device).train()
    step = make_training_step(model, make_optimizer(model, 1e-3, 0.01, device, graph), 1.0, device, graph)
    return count_parameters(model), lambda: step(tokens, targets)


HIDDEN_PRODUCTS = {"gru": (2, 1), "lstm": (4,), "rnn": (1,)}
"""Per cell, the hidden-side products of one time step, in multiples of H output rows: the GRU's
candidate needs r * h_prev, so its r, z rows and its candidate's rows are two products (gru.cpp)."""


MIN_STEPS_TO_PACK = 4
"""`StepProduct::kMinStepsToPack` (cells/kernels.h): shorter sequences use the weight as it is."""


def step_products(weight: Tensor, batch: int, steps: int) -> Callable[[Tensor], Tensor]:
    """x (batch, K) -> x W^T for W (N, K), as a compiled scan runs it (`StepProduct` in
    cells/kernels.cpp): in float32 on the CPU through the per-step library, W packed once into its
    layout when the sequence has at least MIN_STEPS_TO_PACK steps; otherwise ATen's product."""
    weight = weight.contiguous()
    pack = steps >= MIN_STEPS_TO_PACK
    if backend.onednn_for(weight, None, step=True):  # a scan's product: the library, whatever its size
        packed = torch.ops.mkldnn._reorder_linear_weight(weight, batch) if pack else weight
        return lambda x: torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")
    if (pack and weight.device.type == "cpu" and weight.dtype == torch.float32
            and hasattr(torch.ops.mkl, "_mkl_reorder_linear_weight")):
        packed = torch.ops.mkl._mkl_reorder_linear_weight(weight, batch)
        return lambda x: torch.ops.mkl._mkl_linear(x, packed, weight, None, batch)
    return lambda x: torch.mm(x, weight.T)


def training_products_alone(model: RecurrentLM, batch: int, steps: int) -> tuple[Callable[[], None], int]:
    """A closure doing only the matrix products of one training step of `model` (forward and
    backward, each through the library our step uses for its kind, nothing else), and their count
    of multiply-adds: the time no implementation doing these products in float32 can beat.

    Per layer: the scan's hidden-side products, `steps` of them forward on (batch, H) and `steps`
    backward on (batch, G*H), with the weights packed per sequence as the scans pack them; the
    hidden-side weight gradient over all N = steps * batch rows; above the first layer, the input
    products, their input gradient and their weight gradient over N rows; for the first layer, the
    (V, G*H) table and its two gradients; the output layer and its two gradients."""
    config, n = model.config, steps * batch
    hidden, vocab, embd = config.hidden, config.vocab_size, config.embd
    head = model.head.weight.detach()  # (V, H)

    def rand(*shape: int) -> Tensor:  # (shape) inputs and output gradients; the values do not matter
        return torch.randn(*shape, dtype=head.dtype, device=head.device)

    x, grad_out = rand(n, hidden), rand(n, vocab)  # a layer's input and output (N, H); d logits (N, V)
    table_grad = rand(vocab, model.layers[0].cell.weight_ih.shape[0])  # d first-layer table (V, G*H)
    h_step = rand(batch, hidden)  # one step's state (batch, H)
    macs = 0
    large: list[Callable[[], Tensor]] = []
    scans: list[list[tuple[Tensor, Tensor]]] = []  # per layer, per product: (weight (k H, H), its d output (batch, k H))
    large += [functools.partial(linear, x, head), functools.partial(linear, grad_out, head.T),
              functools.partial(t_mm, grad_out, x)]
    macs += 3 * n * hidden * vocab
    for i, layer in enumerate(model.layers):
        w_ih, w_hh = layer.cell.weight_ih.detach(), layer.cell.weight_hh.detach()  # (G*H, I), (G*H, H)
        gates = w_hh.shape[0]
        grad_gates = rand(n, gates)  # d pre-activations (N, G*H)
        large.append(functools.partial(t_mm, grad_gates, x))  # d W_hh
        macs += n * gates * hidden
        if i == 0:
            emb = model.embedding.weight.detach()  # (V, E)
            large += [functools.partial(linear, emb, w_ih), functools.partial(t_mm, table_grad, emb),
                      functools.partial(linear, table_grad, w_ih.T)]
            macs += 3 * vocab * embd * gates
        else:
            large += [functools.partial(linear, x, w_ih), functools.partial(linear, grad_gates, w_ih.T),
                      functools.partial(t_mm, grad_gates, x)]
            macs += 3 * n * hidden * gates
        groups = torch.split(w_hh, [k * hidden for k in HIDDEN_PRODUCTS[config.cell]])
        scans.append([(w, rand(batch, w.shape[0])) for w in groups])
        macs += 2 * n * gates * hidden

    def run() -> None:
        with torch.no_grad():
            for product in large:
                product()
            for products in scans:  # packed per sequence, as the scans pack them
                forward = [step_products(w, batch, steps) for w, _ in products]
                for _ in range(steps):
                    for product in forward:
                        product(h_step)
                backward = [(step_products(w.T, batch, steps), grad) for w, grad in products]
                for _ in range(steps):
                    for product, grad in backward:
                        product(grad)

    return run, macs


def training_contenders(config: ModelConfig, tokens: Tensor, targets: Tensor, device: torch.device):
    """Name -> training-step closure, for each implementation of one model shape (on CUDA, ours
    both eager and replayed as a CUDA graph), and the matrix products of our step alone."""
    study = StepByStepLM(config).to(device).train()
    library = TorchLM(config).to(device).train()
    parameters, ours = our_training_step(config, tokens, targets, device, graph=False)
    contenders = {"step-by-step": reference_training_step(study, tokens, targets), "ours": ours}
    if device.type == "cuda":
        contenders["ours (graph)"] = our_training_step(config, tokens, targets, device, graph=True)[1]
    contenders["PyTorch"] = reference_training_step(library, tokens, targets)
    batch, steps = tokens.shape
    contenders["products alone"] = training_products_alone(RecurrentLM(config).to(device), batch, steps)[0]
    return parameters, contenders


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


@dataclass
class TrainingRow:
    model: str
    implementation: str
    seconds: float
    tokens: int
    flops: float
    peak: int


LIMIT = "limit"
"""The implementation name of `Limit.product` when it is timed among a model's contenders."""


def benchmark_training(name: str, config: ModelConfig, settings: Settings, device: torch.device,
                       limit: Limit | None = None) -> list[TrainingRow]:
    """One row per implementation of `name`'s training step, timed side by side; with `limit`, a
    row named LIMIT too: the machine's fastest large product, timed in the same rounds (its
    `flops` are the product's, its `tokens` 0)."""
    generator = torch.Generator().manual_seed(0)
    data = torch.randint(config.vocab_size, (settings.batch, settings.seq_len + 1), generator=generator).to(device)
    tokens, targets = data[:, :-1].contiguous(), data[:, 1:].contiguous()
    parameters, contenders = training_contenders(config, tokens, targets, device)
    medians = side_by_side(contenders | ({LIMIT: limit.product} if limit else {}), settings.repeats, device)
    n_tokens = settings.batch * settings.seq_len
    rows = [
        TrainingRow(name, impl, medians[impl], n_tokens, 6.0 * parameters * n_tokens, peak_bytes(fn, device))
        for impl, fn in contenders.items()
    ]
    return rows + ([TrainingRow(name, LIMIT, medians[LIMIT], 0, limit.flops, 0)] if limit else [])


# ---------------------------------------------------------------------------------------------
# The GEMM choices

GEMM_CHOICES = ("mkl", "onednn", "mkl:onednn", "onednn:mkl")
"""Every value of RNNLM_GEMM: one library for both kinds of product, or LARGE:STEP."""


def under_gemm(choice: str, fn: Callable[[], object]) -> Callable[[], object]:
    """fn, run with the GEMM choice `choice` (as RNNLM_GEMM takes it), set through the library's own
    switch (`rnnlm.backend.use_gemm`) and handed back after."""

    def run() -> object:
        previous = backend.use_gemm(backend.Gemms.parse(choice))
        try:
            return fn()
        finally:
            backend.use_gemm(previous)

    return run


def benchmark_gemm_choices(name: str, config: ModelConfig, settings: Settings, device: torch.device) -> dict:
    """Our training step at one model's shape under each GEMM choice, timed side by side, beside the
    rule's own choice for this machine: which is fastest, and how far the rule's is from it."""
    generator = torch.Generator().manual_seed(0)
    data = torch.randint(config.vocab_size, (settings.batch, settings.seq_len + 1), generator=generator)
    tokens, targets = data[:, :-1].contiguous(), data[:, 1:].contiguous()
    contenders = {choice: under_gemm(choice, our_training_step(config, tokens, targets, device, graph=False)[1])
                  for choice in GEMM_CHOICES}
    medians = side_by_side(contenders, settings.repeats, device)
    chosen = str(backend.choose_gemm(backend.cpu_vendor(), backend.has_avx512(), "", torch.backends.mkl.is_available(),
                                     backend.onednn_available()))
    fastest = min(medians, key=medians.get)
    return {"model": name, "ms_per_step": {c: 1e3 * t for c, t in medians.items()}, "rule": chosen,
            "fastest": fastest, "rule_share_of_fastest": medians[fastest] / medians[chosen]}


def gemm_choices_table(records: list[dict]) -> str:
    lines = ["| model | " + " | ".join(f"{c} ms/step" for c in GEMM_CHOICES) + " | the rule's choice | fastest "
             "| the rule's speed, share of the fastest |", "|---|" + "---:|" * len(GEMM_CHOICES) + "---|---|---:|"]
    for r in records:
        times = " | ".join(f"{r['ms_per_step'][c]:,.1f}" for c in GEMM_CHOICES)
        lines.append(f"| {r['model']} | {times} | {r['rule']} | {r['fastest']} | {100 * r['rule_share_of_fastest']:.0f}% |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# The allocator

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
    lines = ["| model | implementation | default ms/step | kept ms/step | kept, speed-up |", "|---|---|---:|---:|---:|"]
    for r in records:
        for impl, ms in r["ms_per_step"].items():
            lines.append(f"| {r['model']} | {impl} | {ms['default']:,.1f} | {ms['kept']:,.1f} | {r['speedup_kept'][impl]:.3f}× |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Sampling


def sampling_contenders(config: ModelConfig, batch: int, new_tokens: int, device: torch.device):
    """Name -> closure generating `new_tokens` tokens statefully for `batch` samples."""
    decoding = Decoding("temperature", temperature=1.0)
    ours = RecurrentLM(config).to(device).eval()
    study = StepByStepLM(config).to(device).eval()
    library = TorchLM(config).to(device).eval()

    def stepwise(model) -> Callable[[], None]:
        @torch.no_grad()
        def run() -> None:
            generator = make_generator(0, device)
            token = torch.zeros(batch, dtype=torch.long, device=device)
            state = None
            for _ in range(new_tokens):
                logits, state = model.step(token, state)
                token = sample_like_the_study(logits, decoding.temperature, generator)

        return run

    def ours_run() -> None:
        generate(ours, [0], mode="stateful", decoding=decoding, max_new_tokens=new_tokens, num_samples=batch,
                 generator=make_generator(0, device))

    return {
        "step-by-step": stepwise(study),
        "ours": ours_run,
        "PyTorch": stepwise(library),
        "products alone": products_alone(ours, batch, new_tokens),
    }


def products_alone(model: RecurrentLM, batch: int, new_tokens: int) -> Callable[[], None]:
    """A closure doing only the per-token matrix products of `model`'s step, on the matrices as the
    step reads them (transposed views of the weights): (batch, H) x (H, G*H) per hidden-side and
    upper input-side matrix, (batch, H) x (H, V) for the head. The first layer's input side is a
    table lookup."""
    matrices = [layer.cell.weight_hh for layer in model.layers]
    matrices += [layer.cell.weight_ih for layer in model.layers[1:]]
    matrices.append(model.head.weight)
    matrices = [m.detach() for m in matrices]  # (rows, H), as the step reads them
    x = matrices[0].new_zeros(batch, model.config.hidden)
    onednn = torch.ops.mkldnn._linear_pointwise  # the GEMM our step uses for each, called as directly as Python allows
    products = [functools.partial(onednn, x, m, None, "none", [], "") if backend.onednn_for(x, x.numel() * m.shape[0], step=True)
                else functools.partial(torch.mm, x, m.T) for m in matrices]

    @torch.no_grad()
    def run() -> None:
        for _ in range(new_tokens):
            for product in products:
                product()

    return run


@dataclass
class SamplingRow:
    model: str
    batch: int
    chars_per_second: dict[str, float]


def benchmark_sampling(name: str, config: ModelConfig, settings: Settings, device: torch.device) -> list[SamplingRow]:
    rows = []
    for batch in settings.sample_batches:
        contenders = sampling_contenders(config, batch, settings.sample_tokens, device)
        medians = side_by_side(contenders, settings.repeats, device)
        rows.append(SamplingRow(name, batch, {k: batch * settings.sample_tokens / s for k, s in medians.items()}))
    return rows


# ---------------------------------------------------------------------------------------------
# Tables


def reference_name(config: ModelConfig) -> str:
    return {"gru": "nn.GRU", "lstm": "nn.LSTM", "rnn": "nn.RNN"}[config.cell]


def training_records(rows: list[TrainingRow], configs: dict[str, ModelConfig]) -> list[dict]:
    """Every figure of the training table, one dict per (model, implementation); each model's
    shares of the limit are of its LIMIT row's rate (`limit_gflops`)."""
    by_key = {(r.model, r.implementation): r for r in rows}
    records = []
    for r in rows:
        if r.implementation == LIMIT:
            continue
        study, library = by_key[(r.model, "step-by-step")], by_key[(r.model, "PyTorch")]
        products, limit = by_key[(r.model, "products alone")], by_key[(r.model, LIMIT)]
        limit_gflops = limit.flops / limit.seconds / 1e9
        gflops = r.flops / r.seconds / 1e9
        records.append({
            "model": r.model,
            "implementation": reference_name(configs[r.model]) if r.implementation == "PyTorch" else r.implementation,
            "ms_per_step": r.seconds * 1e3,
            "tokens_per_second": r.tokens / r.seconds,
            "x_step_by_step": study.seconds / r.seconds,
            "x_pytorch": library.seconds / r.seconds,
            "gflops": gflops,
            "limit_gflops": limit_gflops,
            "share_of_limit": gflops / limit_gflops,
            "share_of_products_alone": products.seconds / r.seconds,
            "peak_mb": r.peak / 2**20,
        })
    return records


def training_table(records: list[dict]) -> str:
    lines = [
        "| model | implementation | ms/step | tokens/s | × step-by-step | × PyTorch | GFLOP/s | % of the limit "
        "| % of products alone | peak MB |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in records:
        lines.append(
            f"| {r['model']} | {r['implementation']} | {r['ms_per_step']:,.1f} | {r['tokens_per_second']:,.0f} | "
            f"{r['x_step_by_step']:.2f} | {r['x_pytorch']:.2f} | {r['gflops']:.1f} | "
            f"{100 * r['share_of_limit']:.0f}% | {100 * r['share_of_products_alone']:.0f}% | {r['peak_mb']:,.1f} |"
        )
    return "\n".join(lines)


def sampling_records(rows: list[SamplingRow]) -> list[dict]:
    """Every figure of the sampling table, one dict per (model, batch)."""
    records = []
    for r in rows:
        c = r.chars_per_second
        records.append({
            "model": r.model,
            "batch": r.batch,
            "chars_per_second": dict(c),
            "ours_x_step_by_step": c["ours"] / c["step-by-step"],
            "ours_x_pytorch": c["ours"] / c["PyTorch"],
            "products_alone_x_step_by_step": c["products alone"] / c["step-by-step"],
            "ours_share_of_products_alone": c["ours"] / c["products alone"],
        })
    return records


def sampling_table(records: list[dict]) -> str:
    lines = [
        "| model | batch | step-by-step chars/s | ours chars/s | PyTorch chars/s | products alone chars/s "
        "| ours × step-by-step | ours × PyTorch | products alone × step-by-step | ours / products alone |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in records:
        c = r["chars_per_second"]
        lines.append(
            f"| {r['model']} | {r['batch']} | {c['step-by-step']:,.0f} | {c['ours']:,.0f} | {c['PyTorch']:,.0f} | "
            f"{c['products alone']:,.0f} | {r['ours_x_step_by_step']:.2f} | {r['ours_x_pytorch']:.2f} | "
            f"{r['products_alone_x_step_by_step']:.2f} | {100 * r['ours_share_of_products_alone']:.0f}% |"
        )
    return "\n".join(lines)


def machine(device: torch.device, keeps_memory: bool) -> dict[str, object]:
    """What the figures were measured on (`keeps_memory`: whether freed memory stays in the heap)."""
    where = {"gpu": torch.cuda.get_device_name()} if device.type == "cuda" else {
        "cpu_vendor": backend.cpu_vendor() or platform.processor(), "cpu_model": backend.cpu_model() or platform.machine(),
        "cpu_generation": backend.cpu_generation(), "cores": os.cpu_count(), "avx512": backend.has_avx512(), "gemm": str(backend.gemm_for(device)),
        "freed_memory_kept": keeps_memory}
    return {"date": datetime.date.today().isoformat(), **where, "torch": torch.__version__,
            "threads": torch.get_num_threads(), "device": str(device)}


def machine_line(info: dict[str, object]) -> str:
    if "gpu" in info:
        where = str(info["gpu"])
    else:
        large, _, step = str(info["gemm"]).partition(":")
        names = {"mkl": "MKL", "onednn": "oneDNN"}
        gemm = names[large] if not step else f"{names[large]} (large), {names[step]} (per step)"
        vendor = " ".join(filter(None, [str(info["cpu_vendor"]), str(info.get("cpu_generation", ""))]))
        where = (f"{info['cpu_model']} ({vendor}, {'with' if info['avx512'] else 'no'} AVX-512), "
                 f"{info['cores']} cores · our products through {gemm} · freed memory "
                 f"{'kept' if info['freed_memory_kept'] else 'given back'}")
    return f"{info['date']} · {where} · torch {info['torch']}, {info['threads']} threads · device {info['device']}"


PARTS = ("training", "sampling", "gemm-choices", "allocator")


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
    models = load_params(args.params).models
    for name in args.models:
        if name not in models or models[name].cell not in ("gru", "lstm", "rnn"):
            parser.error(f"--models {name}: expected a recurrent model of {args.params} ({', '.join(STUDY_MODELS)}, rnn_alpha)")
    device = resolve_device(args.device)
    precision = set_float32_precision(args.allow_tf32) if device.type == "cuda" else "ieee"
    configs = model_configs(args.params, args.models, settings.shrink)
    torch.manual_seed(0)

    parts = set(args.only or ("training", "sampling"))
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
        figures["sampling"] = measure_sampling(configs, load_params(args.params), settings, device, report)
    if args.markdown:
        write_text_atomic(args.markdown, report.text())
    if args.json:
        write_text_atomic(args.json, json.dumps(figures, indent=2) + "\n")


class Report:
    """What the benchmark prints, kept to be written to a file too."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def say(self, text: str) -> None:
        print(text, flush=True)
        self.lines.append(text)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def measure_training(configs: dict[str, ModelConfig], settings: Settings, device: torch.device, limit: Limit,
                     report: Report) -> list[dict]:
    report.say(f"## Training step (batch {settings.batch}, {settings.seq_len} steps, medians of {settings.repeats})\n")
    rows = []
    for name, config in configs.items():
        rows += benchmark_training(name, config, settings, device, limit)
        print(f"  measured {name}", file=sys.stderr, flush=True)
    records = training_records(rows, configs)
    report.say(training_table(records) + "\n")
    limits = {r["model"]: r["limit_gflops"] for r in records}
    report.say(f"The limit, the fastest {settings.matmul_size}² product above, timed again in each model's rounds: "
               + ", ".join(f"{name} {rate:.1f}" for name, rate in limits.items()) + " GFLOP/s.\n")
    return records


def measure_gemm_choices(configs: dict[str, ModelConfig], settings: Settings, device: torch.device,
                         report: Report) -> list[dict]:
    report.say(f"## Our training step under each GEMM choice (RNNLM_GEMM=LARGE:STEP, medians of {settings.repeats})\n")
    records = []
    for name, config in configs.items():
        records.append(benchmark_gemm_choices(name, config, settings, device))
        print(f"  compared GEMMs on {name}", file=sys.stderr, flush=True)
    report.say(gemm_choices_table(records) + "\n")
    return records


def measure_allocator(configs: dict[str, ModelConfig], settings: Settings, device: torch.device,
                      report: Report) -> list[dict]:
    report.say(f"## Training steps with freed memory given back (glibc's default) and kept, medians of {settings.repeats}\n")
    records = []
    for name, config in configs.items():
        records.append(benchmark_allocator(name, config, settings, device))
        print(f"  compared allocator settings on {name}", file=sys.stderr, flush=True)
    report.say(allocator_table(records) + "\n")
    return records


def measure_sampling(configs: dict[str, ModelConfig], params, settings: Settings, device: torch.device,
                     report: Report) -> list[dict]:
    report.say(f"## Stateful sampling ({settings.sample_tokens} characters, medians of {settings.repeats})\n")
    samples = []
    for name, config in configs.items():
        if params.models[name].tokens == "char":
            samples += benchmark_sampling(name, config, settings, device)
            print(f"  sampled {name}", file=sys.stderr, flush=True)
    records = sampling_records(samples)
    report.say(sampling_table(records))
    return records


if __name__ == "__main__":
    main()
