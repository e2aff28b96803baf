"""Sampling: stateful equals re-feeding the whole prefix, stateless ignores all but the last token."""

from __future__ import annotations

import pytest
import torch

from rnnlm.models.config import ModelConfig

from rnnlm.models.language_model import RecurrentLM
from rnnlm.inference.decoding import Decoding, SamplingError, pick
from rnnlm.inference.generation import generate, make_generator
from tests.conftest import cell_configs, randomised_model

STEPPING_CONFIGS = cell_configs({"layers": 3, "layer_norm": True})

DECODINGS = [
    Decoding("greedy"),
    Decoding("temperature", temperature=0.8),
    Decoding("top_k", temperature=1.0, top_k=5),
    Decoding("top_p", temperature=1.0, top_p=0.9),
]


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    m = RecurrentLM(ModelConfig("gru", vocab_size=17, embd=8, hidden=16, layers=2)).double().eval()
    with torch.no_grad():  # larger weights than the init, so the state visibly matters
        for p in m.parameters():
            p.mul_(3.0)
    return m


def _refeed_reference(model, prompt, decoding, steps, num_samples, seed):
    """Every step from a zero state over the whole prefix: slow, and obviously right."""
    generator = make_generator(seed)
    ids = torch.tensor(prompt).expand(num_samples, -1)
    with torch.no_grad():
        for _ in range(steps):
            logits, _ = model(ids, None)
            ids = torch.cat([ids, pick(logits[:, -1], decoding, generator)[:, None]], dim=1)
    return ids[:, len(prompt):]


@pytest.mark.parametrize("decoding", DECODINGS, ids=lambda d: d.strategy)
def test_stateful_equals_refeeding_the_prefix(model, decoding, backend, monkeypatch):
    from rnnlm.compute import backend as switch

    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    got = generate(model, prompt, mode="stateful", decoding=decoding, max_new_tokens=40, num_samples=3,
                   generator=make_generator(11))
    # The reference re-reads the whole prefix 40 times: the readable Python loops run it (in Triton's
    # interpreter that alone took half a minute per strategy); in float64 the loops agree to rounding.
    monkeypatch.setattr(switch, "backend_for", lambda device: "python")
    assert torch.equal(got, _refeed_reference(model, prompt, decoding, 40, 3, seed=11))


@pytest.mark.parametrize("decoding", DECODINGS, ids=lambda d: d.strategy)
def test_stateless_ignores_all_but_the_last_prompt_token(model, decoding, backend):
    a = generate(model, [1, 2, 3, 7], mode="stateless", decoding=decoding, max_new_tokens=30, generator=make_generator(5))
    b = generate(model, [9, 9, 7], mode="stateless", decoding=decoding, max_new_tokens=30, generator=make_generator(5))
    c = generate(model, [7], mode="stateless", decoding=decoding, max_new_tokens=30, generator=make_generator(5))
    assert torch.equal(a, b) and torch.equal(a, c)


def test_stateful_does_depend_on_the_earlier_prompt(model):
    greedy = Decoding("greedy")
    a = generate(model, [1, 2, 3, 7], mode="stateful", decoding=greedy, max_new_tokens=30)
    b = generate(model, [9, 9, 7], mode="stateful", decoding=greedy, max_new_tokens=30)
    assert not torch.equal(a, b)


def test_greedy_is_deterministic_and_seed_free(model):
    runs = [generate(model, [4], mode="stateful", decoding=Decoding("greedy"), max_new_tokens=25,
                     generator=make_generator(seed)) for seed in (0, 1, 2)]
    assert torch.equal(runs[0], runs[1]) and torch.equal(runs[0], runs[2])


def test_seeded_sampling_repeats_and_seeds_differ(model):
    decoding = Decoding("temperature", temperature=1.0)
    run = lambda seed: generate(model, [4, 2], mode="stateful", decoding=decoding, max_new_tokens=50,  # noqa: E731
                                num_samples=4, generator=make_generator(seed))
    assert torch.equal(run(3), run(3))
    assert not torch.equal(run(3), run(4))
    samples = run(3)
    assert samples.shape == (4, 50) and not torch.equal(samples[0], samples[1])  # the batch rows are independent


def test_top_k_draws_only_from_the_k_best():
    logits = torch.tensor([[0.0, 5.0, 1.0, 4.0, -2.0]]).expand(500, -1)
    picked = pick(logits, Decoding("top_k", top_k=2), make_generator(0))
    assert set(picked.tolist()) == {1, 3}


def test_top_p_keeps_the_smallest_set_reaching_p():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    logits = probs.log().expand(2000, -1)
    assert set(pick(logits, Decoding("top_p", top_p=0.75), make_generator(0)).tolist()) == {0, 1}
    assert set(pick(logits, Decoding("top_p", top_p=0.01), make_generator(0)).tolist()) == {0}


def test_zero_new_tokens(model):
    assert generate(model, [1], mode="stateful", decoding=Decoding("greedy"), max_new_tokens=0).shape == (1, 0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"prompt": []}, "the prompt is empty; expected at least one token"),
        ({"max_new_tokens": -1}, "max new tokens -1: expected a non-negative integer"),
        ({"num_samples": 0}, "number of samples 0: expected a positive integer"),
        ({"mode": "forgetful"}, "mode 'forgetful': expected one of stateless, stateful"),
        ({"decoding": Decoding("temperature", temperature=0.0)}, "temperature 0.0: expected a finite positive number"),
        ({"decoding": Decoding("temperature", temperature=-1.0)}, "temperature -1.0: expected a finite positive number"),
        ({"decoding": Decoding("top_k", top_k=0)}, "top-k 0: expected an integer from 1 to the vocabulary size 17"),
        ({"decoding": Decoding("top_k", top_k=18)}, "top-k 18: expected an integer from 1 to the vocabulary size 17"),
        ({"decoding": Decoding("top_p", top_p=1.5)}, r"top-p 1.5: expected a number in \(0, 1\]"),
        ({"decoding": Decoding("beam")}, "strategy 'beam': expected one of greedy, temperature, top_k, top_p"),
    ],
)
def test_bad_requests_are_clear_errors(model, kwargs, message):
    request = {"prompt": [1, 2], "mode": "stateful", "decoding": Decoding("greedy"), "max_new_tokens": 5,
               "num_samples": 1, **kwargs}
    prompt = request.pop("prompt")
    with pytest.raises(SamplingError, match="^" + message):
        generate(model, prompt, **request)


# ---------------------------------------------------------------------------------------------
# pick: which tokens can be drawn and how likely, and its C++ twin


def test_draws_follow_the_candidates_probabilities():
    """Frequencies over 40,000 draws within 0.01 of the probabilities (about 4 standard deviations)."""
    logits = torch.tensor([[0.3, 2.0, -1.0, 1.2, 0.0]])
    many = logits.expand(40_000, -1)
    cases = [
        (Decoding("temperature", temperature=0.7), (logits / 0.7).softmax(-1)[0]),
        (Decoding("top_k", temperature=1.0, top_k=3), logits[0].exp() * torch.tensor([1, 1, 0, 1, 0])),
        # probabilities 0.10, 0.55, 0.03, 0.25, 0.07: ranked 1, 3, ...; before 3 is 0.55 < 0.7, before 0 is 0.80
        (Decoding("top_p", temperature=1.0, top_p=0.7), logits[0].exp() * torch.tensor([0, 1, 0, 1, 0])),
    ]
    for decoding, weights in cases:
        expected = weights / weights.sum()
        counts = torch.bincount(pick(many, decoding, make_generator(1)), minlength=5) / len(many)
        assert torch.allclose(counts, expected.float(), atol=0.01), (decoding, counts, expected)


def test_ties_rank_the_lower_id_first():
    logits = torch.tensor([[1.0, 3.0, 3.0, 3.0, 0.0]])
    assert pick(logits, Decoding("greedy"), None).item() == 1
    assert set(pick(logits.expand(300, -1), Decoding("top_k", top_k=2), make_generator(0)).tolist()) == {1, 2}


def test_top_p_of_one_keeps_every_token():
    logits = torch.zeros(3000, 4)
    assert set(pick(logits, Decoding("top_p", top_p=1.0), make_generator(0)).tolist()) == {0, 1, 2, 3}


def _picks_differ(logits, decoding, compiled, seed):
    python_generator, cpp_generator = make_generator(seed), make_generator(seed)
    by_python = pick(logits, decoding, python_generator)
    by_cpp = compiled.pick(logits, decoding.strategy, decoding.temperature, decoding.top_k, decoding.top_p, cpp_generator)
    same_stream_after = torch.equal(torch.rand(3, generator=python_generator), torch.rand(3, generator=cpp_generator))
    return not (torch.equal(by_python, by_cpp) and same_stream_after)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("decoding", DECODINGS + [Decoding("top_k", temperature=0.5, top_k=1)], ids=lambda d: d.strategy)
def test_the_compiled_pick_is_the_same_function(decoding, dtype):
    """Same ids and the same numbers drawn from the generator, on random rows and rows with ties."""
    from rnnlm.compute import build

    compiled = build.compiled()
    assert compiled is not None, "the C++ code did not build"
    torch.manual_seed(0)
    for seed in range(20):
        logits = (torch.randn(6, 23) * 3).to(dtype)
        logits[1, 5:9] = logits[1].max()  # ties at the top
        logits[2] = torch.randint(0, 3, (23,)).to(dtype)  # many ties
        assert not _picks_differ(logits, decoding, compiled, seed)
        assert not _picks_differ(logits[3:4], decoding, compiled, seed)  # batch 1


# ---------------------------------------------------------------------------------------------
# The generation loop in C++ (what `generate` runs on the CPU) and its Python twin

def _float32_model(config: ModelConfig) -> RecurrentLM:
    return randomised_model(config).float()


def _has_compiled_loops(cell: str) -> bool:
    from rnnlm.compute import backend, build

    assert build.compiled() is not None, "the C++ code did not build"
    return backend.has_compiled_loops(build.compiled(), cell)


@pytest.mark.parametrize("config", STEPPING_CONFIGS, ids=lambda c: c.cell)
def test_the_compiled_advance_gives_the_python_advances_logits_bit_for_bit(config):
    from rnnlm.inference.advancing import Advancer
    from rnnlm.models.cells.base import entries

    advancer = Advancer(_float32_model(config))
    if not _has_compiled_loops(config.cell):
        assert advancer.compiled is None  # a cell without compiled loops advances through its Python loops
        return
    python_advancer = Advancer(_float32_model(config))
    python_advancer.compiled = None  # its own loop over the layers, with the compiled layer advances
    tokens = torch.tensor([3, 0, 10])
    state = python_state = None
    for _ in range(4):
        logits, state = advancer(tokens, state)
        python_logits, python_state = python_advancer(tokens, python_state)
        assert torch.equal(logits, python_logits)
        tokens = logits.argmax(-1)
    flat, python_flat = [t for s in state for t in entries(s)], [t for s in python_state for t in entries(s)]
    assert all(torch.equal(a, b) for a, b in zip(flat, python_flat, strict=True))


@pytest.mark.parametrize("choice, streams", [("mkl:onednn", 3), ("mkl:mkl:onednn", 1)], ids=["narrow", "one-row"])
def test_the_compiled_advance_equals_the_python_advance_where_onednn_runs_the_products(choice, streams, gemm):
    """The same, with layers wide enough that the per-step products (upper input sides with their
    bias, hidden sides, the head with its bias) reach oneDNN's size threshold, with oneDNN chosen for
    them (for every narrow product, or for those of one row at one stream): both add each bias after
    oneDNN's product, so the logits stay equal bit for bit."""
    from torch.profiler import ProfilerActivity, profile

    from rnnlm.compute import backend
    from rnnlm.inference.advancing import Advancer

    if not backend.onednn_available():
        pytest.skip("this PyTorch has no oneDNN linear op")
    gemm(choice)
    config = ModelConfig("lstm", vocab_size=700, embd=16, hidden=384, layers=2, layer_norm=True)
    advancer, python_advancer = Advancer(_float32_model(config)), Advancer(_float32_model(config))
    assert advancer.compiled is not None, "the C++ code did not build"
    python_advancer.compiled = None
    tokens, state, python_state = torch.tensor([3, 0, 10][:streams]), None, None  # 384 x 4H: past 2^19 multiply-adds
    for _ in range(3):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            python_logits, python_state = python_advancer(tokens, python_state)
        assert "mkldnn::_linear_pointwise" in {event.name for event in prof.events()}
        logits, state = advancer(tokens, state)
        assert torch.equal(logits, python_logits)
        tokens = logits.argmax(-1)


@pytest.mark.parametrize("mode", ["stateful", "stateless"])
@pytest.mark.parametrize("config", STEPPING_CONFIGS, ids=lambda c: c.cell)
def test_the_compiled_loop_picks_the_python_loops_ids(config, mode):
    from rnnlm.inference.generation import generation_loop
    from rnnlm.inference.advancing import Advancer

    model = _float32_model(config)
    advancer = Advancer(model)
    assert (advancer.compiled is not None) == _has_compiled_loops(config.cell)  # else generate runs the Python loop
    stateful = mode == "stateful"
    for decoding in DECODINGS:
        for batch in (1, 3):
            prompt = torch.tensor([[4, 7, 1]]).expand(batch, -1)  # vocabulary of 11
            with torch.inference_mode():
                logits, state = model(prompt) if stateful else advancer(prompt[:, -1])
            logits = logits[:, -1] if stateful else logits
            seen = []
            by_cpp = generate(model, [4, 7, 1], mode=mode, decoding=decoding, max_new_tokens=30, num_samples=batch,
                              generator=make_generator(batch), on_token=seen.append)
            by_python = generation_loop(advancer, logits, state, stateful=stateful, decoding=decoding,
                                        max_new_tokens=30, generator=make_generator(batch))
            assert torch.equal(by_cpp, by_python), (decoding, batch)
            assert torch.equal(torch.stack(seen, dim=1), by_cpp)
