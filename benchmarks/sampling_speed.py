"""The sampling benchmark: stateful generation, ours beside the study's cell and PyTorch's layers
stepped by a Python loop, and the matrix products one step of our model cannot avoid; and stateless
generation of one sample, ours (each token's logits computed once) beside an advance for every token."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass

import torch

from rnnlm.compute import backend
from rnnlm.inference.decoding import Decoding
from rnnlm.inference.advancing import Advancer
from rnnlm.inference.generation import generate, generation_loop, make_generator
from rnnlm.models.config import ModelConfig
from rnnlm.models.language_model import RecurrentLM
from rnnlm.reporting.markdown import table_head, table_row

from benchmarks.references import sample_like_the_study, yardsticks
from benchmarks.timing import Report, Settings, side_by_side


def sampling_contenders(config: ModelConfig, batch: int, new_tokens: int, device: torch.device):
    """Name -> closure generating `new_tokens` tokens statefully for `batch` samples."""
    decoding = Decoding("temperature", temperature=1.0)
    ours = RecurrentLM(config).to(device).eval()
    references = {name: model.to(device).eval() for name, model in yardsticks(config).items()}

    def stepwise(model) -> Callable[[], None]:
        @torch.no_grad()
        def run() -> None:
            generator = make_generator(0, device)
            token = torch.zeros(batch, dtype=torch.long, device=device)
            state = None
            for _ in range(new_tokens):
                logits, state = model.advance(token, state)
                token = sample_like_the_study(logits, decoding.temperature, generator)

        return run

    def ours_run() -> None:
        generate(ours, [0], mode="stateful", decoding=decoding, max_new_tokens=new_tokens, num_samples=batch,
                 generator=make_generator(0, device))

    contenders = {"step-by-step": stepwise(references["step-by-step"])} if "step-by-step" in references else {}
    contenders["ours"] = ours_run
    if "PyTorch" in references:
        contenders["PyTorch"] = stepwise(references["PyTorch"])
    return contenders | {"products alone": products_alone(ours, batch, new_tokens)}


def products_alone(model: RecurrentLM, batch: int, new_tokens: int) -> Callable[[], None]:
    """A closure doing only the per-token matrix products of `model`'s advance, on the matrices as the
    advance reads them (transposed views of the weights): (batch, H) x (H, G*H) per hidden-side and
    upper input-side matrix, (batch, H) x (H, V) for the head. The first layer's input side is a
    table lookup; a vector recurrence has no hidden-side product."""
    matrices = [layer.cell.weight_hh for layer in model.layers if layer.cell.recurrence == "matrix"]
    matrices += [layer.cell.weight_ih for layer in model.layers[1:]]
    matrices.append(model.head.weight)
    matrices = [m.detach() for m in matrices]  # (rows, H), as the step reads them
    x = matrices[0].new_zeros(batch, model.config.hidden)
    onednn = torch.ops.mkldnn._linear_pointwise  # the GEMM our step uses for each, called as directly as Python allows
    products = [functools.partial(onednn, x, m, None, "none", [], "") if backend.onednn_for(x, x.numel() * m.shape[0], rows=batch)
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
    """A row per batch width of `settings.sample_batches`: each sampler's characters per second at
    `name`'s shape, from medians timed side by side."""
    rows = []
    for batch in settings.sample_batches:
        contenders = sampling_contenders(config, batch, settings.sample_tokens, device)
        medians = side_by_side(contenders, settings.repeats, device)
        rows.append(SamplingRow(name, batch, {k: batch * settings.sample_tokens / s for k, s in medians.items()}))
    return rows


def sampling_records(rows: list[SamplingRow]) -> list[dict]:
    """Every figure of the sampling table, one dict per (model, batch)."""
    records = []
    for r in rows:
        c = r.chars_per_second
        records.append({
            "model": r.model,
            "batch": r.batch,
            "chars_per_second": dict(c),
            "ours_x_step_by_step": c["ours"] / c["step-by-step"] if "step-by-step" in c else None,
            "ours_x_pytorch": c["ours"] / c["PyTorch"] if "PyTorch" in c else None,
            "products_alone_x_step_by_step": c["products alone"] / c["step-by-step"] if "step-by-step" in c else None,
            "ours_share_of_products_alone": c["ours"] / c["products alone"],
        })
    return records


def sampling_table(records: list[dict]) -> str:
    lines = table_head(["model", "batch", "step-by-step chars/s", "ours chars/s", "PyTorch chars/s",
                        "products alone chars/s", "ours × step-by-step", "ours × PyTorch",
                        "products alone × step-by-step", "ours / products alone"], "lrrrrrrrrr")
    for r in records:
        c = r["chars_per_second"]
        rate = {name: "—" if name not in c else f"{c[name]:,.0f}" for name in ("step-by-step", "PyTorch")}
        ratio = {key: "—" if r[key] is None else f"{r[key]:.2f}"
                 for key in ("ours_x_step_by_step", "ours_x_pytorch", "products_alone_x_step_by_step")}
        lines.append(table_row([
            r["model"], r["batch"], rate["step-by-step"], f"{c['ours']:,.0f}", rate["PyTorch"],
            f"{c['products alone']:,.0f}", ratio["ours_x_step_by_step"], ratio["ours_x_pytorch"],
            ratio["products_alone_x_step_by_step"], f"{100 * r['ours_share_of_products_alone']:.0f}%"]))
    return "\n".join(lines)


def measure_sampling(configs: dict[str, ModelConfig], params, settings: Settings, device: torch.device,
                     report: Report) -> list[dict]:
    """The sampling section of `report` for the character models of `configs` (`params` says which
    they are): its table written, its records returned."""
    report.say(f"## Stateful sampling ({settings.sample_tokens} characters, medians of {settings.repeats})\n")
    samples = []
    for name, config in configs.items():
        if params.models[name].tokens == "char":
            samples += benchmark_sampling(name, config, settings, device)
            print(f"  sampled {name}", file=sys.stderr, flush=True)
    records = sampling_records(samples)
    report.say(sampling_table(records))
    return records


def stateless_contenders(config: ModelConfig, new_tokens: int, device: torch.device) -> dict[str, Callable[[], None]]:
    """Name -> closure generating `new_tokens` tokens of one stateless sample at temperature 1: "ours"
    (`generate`: on the CPU the compiled loop, which computes each token's logits once) and "an advance
    a token" (the same advancer called for every token by the Python loop, as the loop ran before)."""
    decoding = Decoding("temperature", temperature=1.0)
    model = RecurrentLM(config).to(device).eval()
    advancer = Advancer(model)

    def ours() -> None:
        generate(model, [0], mode="stateless", decoding=decoding, max_new_tokens=new_tokens,
                 generator=make_generator(0, device))

    @torch.inference_mode()
    def every_token() -> None:
        logits, state = advancer(torch.zeros(1, dtype=torch.long, device=device))
        generation_loop(advancer, logits, state, stateful=False, decoding=decoding, max_new_tokens=new_tokens,
                        generator=make_generator(0, device))

    return {"ours": ours, "an advance a token": every_token}


def measure_stateless_sampling(configs: dict[str, ModelConfig], params, settings: Settings, device: torch.device,
                               report: Report) -> list[dict]:
    """The stateless section of `report`: one sample of each character model of `configs`, both ways
    timed side by side; a record per model (characters per second each way, and their ratio)."""
    report.say(f"## Stateless sampling, one sample ({settings.sample_tokens} characters, medians of "
               f"{settings.repeats})\n")
    records = []
    for name, config in configs.items():
        if params.models[name].tokens != "char":
            continue
        medians = side_by_side(stateless_contenders(config, settings.sample_tokens, device), settings.repeats, device)
        rates = {k: settings.sample_tokens / s for k, s in medians.items()}
        records.append({"model": name, "chars_per_second": rates,
                        "ours_x_every_token": rates["ours"] / rates["an advance a token"]})
        print(f"  sampled {name} statelessly", file=sys.stderr, flush=True)
    lines = table_head(["model", "ours chars/s", "an advance a token chars/s", "ours × an advance a token"], "lrrr")
    lines += [table_row([r["model"], f"{r['chars_per_second']['ours']:,.0f}",
                         f"{r['chars_per_second']['an advance a token']:,.0f}", f"{r['ours_x_every_token']:.2f}"])
              for r in records]
    report.say("\n".join(lines))
    return records

