"""CUDA: the Python loops against float64 CPU references, graph against eager steps, a CUDA-trained
checkpoint on the CPU, sampling and scoring on the GPU. Skipped on a machine without a GPU;
`benchmarks/gpu_check.py` runs them where there is one."""

from __future__ import annotations

import copy
import os
import subprocess
import sys

import pytest
import torch

from rnnlm.compute import backend
from rnnlm.models.checkpoint import load_checkpoint, save_checkpoint
from rnnlm.data.corpus import character_vocabulary, split_corpus
from rnnlm.compute.device import set_float32_precision
from rnnlm.models.cells import CELLS
from rnnlm.models.config import ModelConfig
from rnnlm.models.language_model import RecurrentLM
from rnnlm.params import parse_params
from rnnlm.inference.decoding import Decoding
from rnnlm.inference.generation import generate, make_generator
from rnnlm.evaluation.scoring import streamed_nll, streamed_token_nll, windowed_nll
from rnnlm.data.tokenizers import CharTokenizer
from rnnlm.training.step import make_optimizer, make_training_step
from tests.conftest import REPO_ROOT, cell_configs, synthetic_play, train_model

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

CUDA = torch.device("cuda")
CONFIGS = {config.cell: config for config in cell_configs({"layer_norm": True}, vocab_size=40, embd=24, hidden=48)}


@pytest.fixture(autouse=True)
def exact_float32():
    set_float32_precision(False)


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double().cpu() - b.double().cpu()).norm() / b.double().cpu().norm())


def _forward_backward(model: RecurrentLM, tokens: torch.Tensor):
    """logits and every parameter's gradient of a fixed loss."""
    model.zero_grad(set_to_none=True)
    logits, _ = model(tokens)
    (logits * torch.linspace(-1, 1, logits.shape[-1], device=logits.device, dtype=logits.dtype)).sum().backward()
    return logits.detach(), {n: p.grad.detach() for n, p in model.named_parameters()}


@pytest.mark.parametrize("loops", ["triton", "aten"])
@pytest.mark.parametrize("cell", sorted(CONFIGS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cuda_loops_match_a_float64_cpu_reference(cell, dtype, loops, monkeypatch):
    """Both CUDA loops (Triton-fused, the default; ATen calls, with RNNLM_NATIVE=0): a whole model's
    logits and every gradient against the CPU in float64."""
    assert backend.backend_for(CUDA) == "triton"
    if loops == "aten":
        monkeypatch.setenv("RNNLM_NATIVE", "0")
    torch.manual_seed(0)
    reference = RecurrentLM(CONFIGS[cell]).double()
    tokens = torch.randint(40, (6, 33))
    ref_logits, ref_grads = _forward_backward(reference, tokens)
    gpu = RecurrentLM(CONFIGS[cell]).to(CUDA, dtype)
    gpu.load_state_dict(reference.state_dict())
    logits, grads = _forward_backward(gpu, tokens.to(CUDA))
    tolerance = 1e-5 if dtype == torch.float32 else 1e-12
    assert _relative(logits, ref_logits) < tolerance
    for name, grad in grads.items():
        assert _relative(grad, ref_grads[name]) < tolerance * 10, name


@pytest.mark.parametrize("loops", ["triton", "aten"])
@pytest.mark.parametrize("cell", sorted(CONFIGS))
def test_cuda_layers_with_masks_match_float64_cpu(cell, loops, monkeypatch):
    """One layer with given dropout masks and a given start state, values and gradients."""
    if loops == "aten":
        monkeypatch.setenv("RNNLM_NATIVE", "0")
    torch.manual_seed(1)
    layer = CELLS[cell].layer(12, 40, dropout=0.3).double()
    x = torch.randn(5, 21, 12, dtype=torch.float64)
    masks = (torch.rand(21, 5, 40) > 0.3).double() / 0.7
    state = layer.cell.zero_state(5, x)
    state = tuple(torch.randn_like(s) for s in state) if isinstance(state, tuple) else torch.randn_like(state)
    results = []
    for device, dtype in (("cpu", torch.float64), (CUDA, torch.float32)):
        on = copy.deepcopy(layer).to(device, dtype)
        inputs = x.to(device, dtype, copy=True).requires_grad_(True)  # a leaf of its own on each device
        start = tuple(s.to(device, dtype) for s in state) if isinstance(state, tuple) else state.to(device, dtype)
        out, final = on(inputs, start, masks.to(device, dtype))
        out.pow(2).sum().backward()
        results.append([out.detach(), inputs.grad, *(p.grad for p in on.parameters())])
    for reference, value in zip(*results):
        assert _relative(value, reference) < 1e-4


@pytest.mark.parametrize("cell", sorted(CONFIGS))  # every registered cell (the registry), not a list by hand
@pytest.mark.parametrize("dropout", [0.0, 0.2])
def test_graph_and_eager_steps_give_the_same_losses(cell, dropout):
    config = ModelConfig(**{**CONFIGS[cell].to_dict(), "dropout": dropout})
    batches = torch.randint(40, (12, 2, 8, 17), generator=torch.Generator().manual_seed(1)).to(CUDA)
    losses = {}
    for graph in (False, True):
        torch.manual_seed(0)
        model = RecurrentLM(config).to(CUDA).train()
        step = make_training_step(model, make_optimizer(model, 3e-3, 0.01, CUDA, graph=True), 1.0, CUDA, graph)
        losses[graph] = torch.stack([step(b[0], b[1]).clone() for b in batches]).cpu()
    assert torch.allclose(losses[True], losses[False], rtol=1e-5, atol=1e-6), (losses[True], losses[False])
    assert losses[True][-1] < losses[True][0]


def test_graph_step_follows_the_learning_rate_schedule():
    torch.manual_seed(0)
    model = RecurrentLM(CONFIGS["gru"]).to(CUDA).train()
    optimizer = make_optimizer(model, 1e-2, 0.0, CUDA, graph=True)
    step = make_training_step(model, optimizer, 1.0, CUDA, graph=True)
    tokens = torch.randint(40, (4, 8), device=CUDA)
    for _ in range(5):  # warm-up, capture, replays
        step(tokens, tokens)
    optimizer.param_groups[0]["lr"].fill_(0.0)
    before = [p.detach().clone() for p in model.parameters()]
    step(tokens, tokens)
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters()))


TEXT = synthetic_play(12_000)
SPLIT = split_corpus(TEXT, 0.9)
TOKENIZER = CharTokenizer(character_vocabulary(TEXT))


def _cuda_params(raw_params, graph: bool, state: str = "reset"):
    raw_params["models"]["astra_beta"].update({"embd": 16, "hidden": 32, "epochs": 2, "steps_per_epoch": 15,
                                               "train": {"state": state}})
    raw_params["train"].update({"batch_size": 8, "seq_len": 32, "device": "cuda", "cuda_graph": graph,
                                "check_every": 7})
    return parse_params(raw_params)


@pytest.mark.parametrize("state", ["reset", "carried"])
def test_training_on_cuda_and_its_checkpoint_on_the_cpu(raw_params, tmp_path, state):
    """Eager and graphed training agree (a carried run is eager either way: a graph holds no state
    between replays), and the CUDA checkpoint scores on the CPU as on the GPU."""
    results = {g: train_model(_cuda_params(copy.deepcopy(raw_params), g, state), "astra_beta", TOKENIZER, SPLIT.train,
                              SPLIT.val) for g in (False, True)}
    eager, graph = ([r["train_loss"] for r in results[g].history.steps] for g in (False, True))
    assert len(graph) == 30 and graph == pytest.approx(eager, rel=1e-4)
    assert results[True].device == "cuda"

    path = tmp_path / "model.pt"
    save_checkpoint(path, results[True].checkpoint)
    cpu_model = load_checkpoint(path).build_model(torch.device("cpu"))
    gpu_model = load_checkpoint(path, map_location="cuda").build_model(CUDA)
    val = torch.tensor(TOKENIZER.encode(SPLIT.val))
    on_cpu, on_gpu = windowed_nll(cpu_model, val, 32), windowed_nll(gpu_model, val, 32)
    assert on_gpu.mean == pytest.approx(on_cpu.mean, rel=1e-5)
    assert streamed_nll(gpu_model, val).mean == pytest.approx(streamed_nll(cpu_model, val).mean, rel=1e-5)
    assert results[True].history.epochs[-1]["val_loss"] == pytest.approx(on_cpu.mean, rel=1e-5)



@pytest.mark.parametrize("loops", ["triton", "aten"])
@pytest.mark.parametrize("cell", sorted(CONFIGS))
def test_the_stateful_pass_replayed_from_a_graph_is_the_eager_pass(cell, loops, monkeypatch):
    """The stateful pass's chunks after the first replayed from one captured CUDA graph
    (`stream_graph`), the state carried inside it and a shorter tail run eagerly, give each token's
    loss as the eager pass does, and the default takes the graph on CUDA."""
    if loops == "aten":
        monkeypatch.setenv("RNNLM_NATIVE", "0")
    torch.manual_seed(0)
    model = RecurrentLM(CONFIGS[cell]).to(CUDA).eval()
    tokens = torch.randint(0, 40, (8 * 16 + 7,))  # 8 whole chunks of 16 and a tail of 6 predicted tokens
    eager = streamed_token_nll(model, tokens, chunk=16, graph=False)
    graphed = streamed_token_nll(model, tokens, chunk=16)
    assert graphed.shape == eager.shape == (8 * 16 + 6,)
    torch.testing.assert_close(graphed, eager, rtol=1e-6, atol=1e-6)
    on_cpu = streamed_token_nll(copy.deepcopy(model).cpu(), tokens, chunk=16)
    torch.testing.assert_close(graphed.cpu(), on_cpu, rtol=1e-4, atol=1e-4)

ONE_RUN = """
import copy, sys, yaml
from tests.conftest import REPO_ROOT
from tests.test_cuda import TOKENIZER, SPLIT, _cuda_params
from tests.conftest import train_model
raw = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
result = train_model(_cuda_params(raw, True), "astra_beta", TOKENIZER, SPLIT.train, SPLIT.val)
print("losses", " ".join(float(s["train_loss"]).hex() for s in result.history.steps))
print("val", float(result.history.epochs[-1]["val_loss"]).hex())
"""


def test_runs_sharing_the_gpu_as_processes_compute_what_they_compute_alone():
    """Two trainings of one seed at once, in two processes (as `gpu_check.py --study --jobs N` runs
    them), and the same training alone: every step's loss and the validation loss equal bit for bit."""
    def start():
        return subprocess.Popen([sys.executable, "-c", ONE_RUN], cwd=REPO_ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")
                                                                       + os.pathsep + str(REPO_ROOT)})

    def finish(process) -> list[str]:
        out, err = process.communicate(timeout=600)
        assert process.returncode == 0, err
        # the numbers only: the epoch lines on stdout carry seconds, which differ between runs
        return [line for line in out.splitlines() if line.startswith(("losses ", "val "))]

    together = [start(), start()]
    shared = [finish(p) for p in together]
    alone = finish(start())
    assert len(alone) == 2 and shared[0] == shared[1] == alone


@pytest.mark.parametrize("mode", ["stateful", "stateless"])
def test_sampling_on_cuda_repeats_with_a_cuda_generator(mode):
    torch.manual_seed(0)
    model = RecurrentLM(CONFIGS["lstm"]).to(CUDA)
    decoding = Decoding("top_k", temperature=1.0, top_k=5)

    def run():
        return generate(model, [1, 2, 3], mode=mode, decoding=decoding, max_new_tokens=20, num_samples=3,
                        generator=make_generator(7, CUDA))

    first = run()
    assert first.shape == (3, 20) and first.device.type == "cuda"
    assert torch.equal(first, run())


def test_incremental_stateful_logits_equal_one_forward_on_cuda():
    torch.manual_seed(0)
    model = RecurrentLM(CONFIGS["gru"]).to(CUDA).eval()
    tokens = torch.randint(40, (2, 20), device=CUDA)
    with torch.no_grad():
        whole, _ = model(tokens)
        state, pieces = None, []
        for t in range(20):
            logits, state = model(tokens[:, t : t + 1], state)
            pieces.append(logits)
    assert torch.allclose(torch.cat(pieces, dim=1), whole, atol=1e-5)


def test_a_cpu_generator_for_a_cuda_model_is_refused():
    model = RecurrentLM(CONFIGS["gru"]).to(CUDA)
    with pytest.raises(Exception, match="the sampling generator is on cpu, the model on cuda"):
        generate(model, [1], mode="stateful", decoding=Decoding("temperature", temperature=1.0),
                 max_new_tokens=2, generator=make_generator(0, "cpu"))
