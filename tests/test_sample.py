"""The sampling command: text as it is generated, and one clear line for every bad input."""

from __future__ import annotations

import pytest

from tests.conftest import REPO_ROOT


@pytest.fixture
def sample(in_process):
    """`python -m rnnlm.sample ARGS` from the repository's root, run in this process (conftest's
    `in_process`; tests/test_faults.py runs it as a process, into a closed pipe and a full disk)."""
    return lambda *args: in_process(["-m", "rnnlm.sample", *args], REPO_ROOT)


def test_prints_the_prompt_and_its_continuation(char_checkpoint, sample):
    done = sample(str(char_checkpoint), "--prompt", "ROMEO: ", "--max-new-tokens", "40", "--seed", "3")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ROMEO: ") and len(done.stdout) == len("ROMEO: ") + 40 + 1
    again = sample(str(char_checkpoint), "--prompt", "ROMEO: ", "--max-new-tokens", "40", "--seed", "3")
    assert again.stdout == done.stdout


def test_prompt_file_modes_and_several_samples(char_checkpoint, tmp_path, sample):
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("KING RICHARD:\nGood ")
    done = sample(str(char_checkpoint), "--prompt-file", str(prompt), "--mode", "stateless", "--strategy",
                  "temperature", "--temperature", "0.8", "--num-samples", "3", "--max-new-tokens", "10")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("--- sample ") == 3 and "(stateless, temperature 0.8)" in done.stdout
    assert done.stdout.count("KING RICHARD:\nGood ") == 3


def test_sentencepiece_checkpoint(sentencepiece_checkpoint, sample):
    done = sample(str(sentencepiece_checkpoint), "--prompt", "KING: ", "--strategy", "top_p", "--max-new-tokens", "15")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("KING: ")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--prompt", "ROMEO @ home~"], "error: the text has characters the vocabulary lacks: '@', '~'"),
        (["--prompt", ""], "error: the prompt is empty; expected at least one token to start from"),
        (["--prompt", "A", "--temperature", "0"], "error: temperature 0.0: expected a finite positive number"),
        (["--prompt", "A", "--temperature", "inf"], "error: temperature inf: expected a finite positive number"),
        (["--prompt", "A", "--temperature", "nan"], "error: temperature nan: expected a finite positive number"),
        (["--prompt", "A", "--top-k", "0"], "error: top-k 0: expected an integer from 1 to the vocabulary size"),
        (["--prompt", "A", "--top-k", "5000"], "error: top-k 5000: expected an integer from 1 to the vocabulary size"),
        (["--prompt", "A", "--max-new-tokens", "-3"], "error: max new tokens -3: expected a non-negative integer"),
        (["--prompt", "A", "--num-samples", "0"], "error: number of samples 0: expected a positive integer"),
        (["--prompt", "A", "--num-samples", str(10**12)],
         "error: sampling 1,000,000,000,000 texts of 200 tokens does not fit in memory: one allocation asked for"),
    ],
)
def test_bad_input_is_one_line_and_prints_no_text(char_checkpoint, args, message, sample):
    done = sample(str(char_checkpoint), *args)
    assert done.returncode == 1
    assert done.stderr.startswith(message) and done.stderr.count("\n") == 1
    assert done.stdout == ""


def test_missing_checkpoint(tmp_path, sample):
    done = sample(str(tmp_path / "absent.pt"), "--prompt", "A")
    assert done.returncode == 1
    assert done.stderr == f"error: {tmp_path / 'absent.pt'}: no such checkpoint file\n"


def test_unreadable_prompt_file(char_checkpoint, tmp_path, sample):
    done = sample(str(char_checkpoint), "--prompt-file", str(tmp_path / "absent.txt"))
    assert done.returncode == 1 and "cannot read the prompt file" in done.stderr


@pytest.mark.parametrize("seed", [2**64, -1, 10**23])
def test_a_seed_out_of_the_generators_range_is_one_line(char_checkpoint, sample, seed):
    done = sample(str(char_checkpoint), "--prompt", "A", "--seed", str(seed))
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == f"error: --seed {seed}: expected an integer from 0 to 2**64 - 1\n"
    assert sample(str(char_checkpoint), "--prompt", "A", "--seed", str(2**64 - 1), "--max-new-tokens", "3").returncode == 0


@pytest.mark.parametrize("which", ["char", "sentencepiece"])
def test_the_streamed_text_is_the_whole_decoded_text_however_long(which, char_checkpoint, sentencepiece_checkpoint,
                                                                   capsys):
    """The stream decodes a window of recent tokens, not the whole prefix again for every token (that
    was quadratic): what it prints is still exactly the decoded sample."""
    import torch

    from rnnlm.models.checkpoint import load_checkpoint
    from rnnlm.sample import _Streamer

    tokenizer = load_checkpoint(char_checkpoint if which == "char" else sentencepiece_checkpoint).tokenizer()
    ids = torch.randint(tokenizer.vocab_size, (400,), generator=torch.Generator().manual_seed(3)).tolist()
    prompt = tokenizer.encode("KING: ")
    streamer = _Streamer(tokenizer, prompt)
    for token in ids:
        streamer(torch.tensor([token]))
    assert capsys.readouterr().out == tokenizer.decode(prompt + ids)
