"""The training-step benchmark: our step beside the same step scanned through autograd (what the
loops buy), the study's step-by-step cell, PyTorch's recurrent layers, the matrix products of our
step alone and the machine's limit, timed side by side
(`benchmarks/speed.py`'s docstring says what each figure means)."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rnnlm.compute import backend
from rnnlm.models.cells import CELLS
from rnnlm.models.cells.base import autograd_scan
from rnnlm.models.config import ModelConfig
from rnnlm.models.kinds import count_parameters
from rnnlm.models.language_model import RecurrentLM
from rnnlm.compute.products import linear, t_mm
from rnnlm.reporting.markdown import table_head, table_row
from rnnlm.training.step import make_optimizer, make_training_step

from benchmarks.references import torch_name, yardsticks
from benchmarks.timing import Limit, Report, Settings, peak_bytes, side_by_side


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


def autograd_training_step(config: ModelConfig, tokens: Tensor, targets: Tensor, device: torch.device):
    """Our training step with every layer scanned through autograd (`autograd_scan`, what a cell
    without loops of its own runs) instead of its cell's loops: what the loops buy."""
    model = RecurrentLM(config).to(device).train()
    for layer in model.layers:
        layer._scan = functools.partial(autograd_scan, layer.cell)  # (products, state, masks)
    step = make_training_step(model, make_optimizer(model, 1e-3, 0.01, device, False), 1.0, device, False)
    return lambda: step(tokens, targets)


def narrow_products(weight: Tensor, batch: int, steps: int) -> Callable[[Tensor], Tensor]:
    """x (batch, K) -> x W^T for W (N, K), as a scan runs it: the library's own `NarrowProduct`
    (compute/cpp/kernels.cpp: the narrow GEMM, W packed once for a long enough sequence) where the
    compiled loops run, else ATen's product."""
    compiled = backend.compiled_for(weight.device)
    if compiled is not None:
        return compiled.NarrowProduct(weight.contiguous(), batch, steps)
    return lambda x: torch.mm(x, weight.T)


def training_products_alone(model: RecurrentLM, batch: int, steps: int) -> tuple[Callable[[], None], int]:
    """A closure doing only the matrix products of one training step of `model` (forward and
    backward, each through the library our step uses for its kind, nothing else), and their count
    of multiply-adds: the time no implementation doing these products in float32 can beat.

    Per layer: the scan's hidden-side products (none for a vector recurrence), `steps` of them forward on (batch, H) and `steps`
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
    h_t = rand(batch, hidden)  # one time step's state (batch, H)
    macs = 0
    large: list[Callable[[], Tensor]] = []
    scans: list[list[tuple[Tensor, Tensor]]] = []  # per layer, per product: (weight (k H, H), its d output (batch, k H))
    large += [functools.partial(linear, x, head), functools.partial(linear, grad_out, head.T),
              functools.partial(t_mm, grad_out, x)]
    macs += 3 * n * hidden * vocab
    for i, layer in enumerate(model.layers):
        w_ih, w_hh = layer.cell.weight_ih.detach(), layer.cell.weight_hh.detach()  # (G*H, I), (G*H, H) or (G*H)
        gates = w_ih.shape[0]
        grad_gates = rand(n, gates)  # d pre-activations (N, G*H)
        matrix = layer.cell.recurrence == "matrix"  # a vector recurrence has no hidden-side product
        if matrix:
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
        groups = torch.split(w_hh, [k * hidden for k in CELLS[config.cell].hidden_products]) if matrix else ()
        scans.append([(w, rand(batch, w.shape[0])) for w in groups])
        macs += 2 * n * gates * hidden if matrix else 0

    def run() -> None:
        with torch.no_grad():
            for product in large:
                product()
            for products in scans:  # packed per sequence, as the scans pack them
                forward = [narrow_products(w, batch, steps) for w, _ in products]
                for _ in range(steps):
                    for product in forward:
                        product(h_t)
                backward = [(narrow_products(w.T, batch, steps), grad) for w, grad in products]
                for _ in range(steps):
                    for product, grad in backward:
                        product(grad)

    return run, macs


def training_contenders(config: ModelConfig, tokens: Tensor, targets: Tensor, device: torch.device):
    """Name -> training-step closure, for each implementation of one model shape (on CUDA, ours
    both eager and replayed as a CUDA graph; the references its cell has), and the matrix products
    of our step alone."""
    references = {name: model.to(device).train() for name, model in yardsticks(config).items()}
    parameters, ours = our_training_step(config, tokens, targets, device, graph=False)
    contenders = {}
    if "step-by-step" in references:
        contenders["step-by-step"] = reference_training_step(references["step-by-step"], tokens, targets)
    contenders["ours"] = ours
    if CELLS[config.cell].python_loops is not None:
        contenders["ours, autograd scan"] = autograd_training_step(config, tokens, targets, device)
    if device.type == "cuda":
        contenders["ours (graph)"] = our_training_step(config, tokens, targets, device, graph=True)[1]
    if "PyTorch" in references:
        contenders["PyTorch"] = reference_training_step(references["PyTorch"], tokens, targets)
    batch, steps = tokens.shape
    contenders["products alone"] = training_products_alone(RecurrentLM(config).to(device), batch, steps)[0]
    return parameters, contenders


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


def training_records(rows: list[TrainingRow], configs: dict[str, ModelConfig]) -> list[dict]:
    """Every figure of the training table, one dict per (model, implementation); each model's
    shares of the limit are of its LIMIT row's rate (`limit_gflops`)."""
    by_key = {(r.model, r.implementation): r for r in rows}
    records = []
    for r in rows:
        if r.implementation == LIMIT:
            continue
        study, library = by_key.get((r.model, "step-by-step")), by_key.get((r.model, "PyTorch"))
        products, limit = by_key[(r.model, "products alone")], by_key[(r.model, LIMIT)]
        limit_gflops = limit.flops / limit.seconds / 1e9
        gflops = r.flops / r.seconds / 1e9
        records.append({
            "model": r.model,
            "implementation": torch_name(configs[r.model].cell) if r.implementation == "PyTorch" else r.implementation,
            "ms_per_step": r.seconds * 1e3,
            "tokens_per_second": r.tokens / r.seconds,
            "x_step_by_step": study.seconds / r.seconds if study else None,
            "x_pytorch": library.seconds / r.seconds if library else None,
            "gflops": gflops,
            "limit_gflops": limit_gflops,
            "share_of_limit": gflops / limit_gflops,
            "share_of_products_alone": products.seconds / r.seconds,
            "peak_mb": r.peak / 2**20,
        })
    return records


def _ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def training_table(records: list[dict]) -> str:
    lines = table_head(["model", "implementation", "ms/step", "tokens/s", "× step-by-step", "× PyTorch", "GFLOP/s",
                        "% of the limit", "% of products alone", "peak MB"], "llrrrrrrrr")
    for r in records:
        lines.append(table_row([
            r["model"], r["implementation"], f"{r['ms_per_step']:,.1f}", f"{r['tokens_per_second']:,.0f}",
            _ratio(r["x_step_by_step"]), _ratio(r["x_pytorch"]), f"{r['gflops']:.1f}",
            f"{100 * r['share_of_limit']:.0f}%", f"{100 * r['share_of_products_alone']:.0f}%", f"{r['peak_mb']:,.1f}"]))
    return "\n".join(lines)


def measure_training(configs: dict[str, ModelConfig], settings: Settings, device: torch.device, limit: Limit,
                     report: Report) -> list[dict]:
    """The training-step section of `report` for every model of `configs`: its table and each
    model's limit (the fastest square product, timed in its rounds) written, its records returned."""
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

