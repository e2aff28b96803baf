"""Sampling: stateful equals re-feeding the whole prefix, stateless ignores all but the last token."""

from __future__ import annotations

import pytest
import torch

from rnnlm.model import ModelConfig, RecurrentLM
from rnnlm.sampling import Decoding, SamplingError, generate, make_generator, pick

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
def test_stateful_equals_refeeding_the_prefix(model, decoding):
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    got = generate(model, prompt, mode="stateful", decoding=decoding, max_new_tokens=40, num_samples=3,
                   generator=make_generator(11))
    assert torch.equal(got, _refeed_reference(model, prompt, decoding, 40, 3, seed=11))


@pytest.mark.parametrize("decoding", DECODINGS, ids=lambda d: d.strategy)
def test_stateless_ignores_all_but_the_last_prompt_token(model, decoding):
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
        ({"decoding": Decoding("temperature", temperature=0.0)}, "temperature 0.0: expected a positive number"),
        ({"decoding": Decoding("temperature", temperature=-1.0)}, "temperature -1.0: expected a positive number"),
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
