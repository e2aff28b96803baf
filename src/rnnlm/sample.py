"""Sample text from a checkpoint: `python -m rnnlm.sample CHECKPOINT --prompt TEXT [options]`.

The checkpoint carries its tokenizer, so nothing else is needed. With one sample the text is
printed as it is generated; with several, each is printed when the batch is done. The prompt must
not be empty (a model needs at least one token to start from), and a character model refuses
characters it has never seen, naming them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from rnnlm.models.checkpoint import load_checkpoint
from rnnlm.errors import RnnlmError
from rnnlm.command_line import run_main
from rnnlm.inference.decoding import STRATEGIES, Decoding
from rnnlm.inference.generation import MODES, check_request, generate, make_generator
from rnnlm.compute.device import resolve_device
from rnnlm.memory import fits_in_memory
from rnnlm.params_base import SEED_EXPECTED, seed_in_range


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m rnnlm.sample", description="Sample text from a checkpoint.")
    parser.add_argument("checkpoint", help="a checkpoint written by the train stage, e.g. models/model.pt")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--prompt", help="the text to continue")
    source.add_argument("--prompt-file", type=Path, help="a UTF-8 file whose whole content is the prompt")
    parser.add_argument("--mode", choices=MODES, default="stateful", help="carry the state (default) or reset it before every token")
    parser.add_argument("--strategy", choices=STRATEGIES, default="top_k", help="how the next token is picked (default top_k)")
    parser.add_argument("--temperature", type=float, default=1.0, help="softmax temperature (default 1.0)")
    parser.add_argument("--top-k", type=int, default=30, help="k for --strategy top_k (default 30)")
    parser.add_argument("--top-p", type=float, default=0.9, help="p for --strategy top_p (default 0.9)")
    parser.add_argument("--max-new-tokens", type=int, default=200, help="tokens to generate (default 200)")
    parser.add_argument("--num-samples", type=int, default=1, help="samples generated at once (default 1)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="cpu", help="where to run (default cpu)")
    return parser.parse_args(argv)


def read_prompt(args: argparse.Namespace) -> str:
    if args.prompt is not None:
        return args.prompt
    try:
        return args.prompt_file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise RnnlmError(f"{args.prompt_file}: cannot read the prompt file ({error})") from error


class _Streamer:
    """Prints the text of one sample as tokens arrive. Each new token's text is what decoding the last
    `WINDOW` tokens adds to decoding them without it, so the cost per token stays constant however
    long the sample (decoding the whole prefix each time made a long sample quadratic); where a
    tokenizer's pieces do not join that way, the whole text is decoded and its new end printed."""

    WINDOW = 64

    def __init__(self, tokenizer, prompt_ids: list[int]):
        self.tokenizer, self.ids = tokenizer, list(prompt_ids)
        self.shown = tokenizer.decode(self.ids)
        sys.stdout.write(self.shown)

    def __call__(self, token: torch.Tensor) -> None:
        self.ids.append(int(token[0]))
        recent = self.ids[-self.WINDOW - 1:]
        before, after = self.tokenizer.decode(recent[:-1]), self.tokenizer.decode(recent)
        if after.startswith(before) and len(self.ids) > len(recent):
            new = after[len(before):]
            self.shown += new
        else:  # the start of the text, or pieces that change what comes before them
            text = self.tokenizer.decode(self.ids)
            new, self.shown = text[len(self.shown):], text
        sys.stdout.write(new)
        sys.stdout.flush()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if not seed_in_range(args.seed):
        raise RnnlmError(f"--seed {args.seed}: expected {SEED_EXPECTED}")
    prompt = read_prompt(args)
    decoding = Decoding(args.strategy, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)
    device = resolve_device(args.device, named="--device")
    checkpoint = load_checkpoint(args.checkpoint)
    tokenizer = checkpoint.tokenizer()
    model = checkpoint.build_model(device)
    decoding.validate(model.config.vocab_size)
    prompt_ids = tokenizer.encode(prompt)
    check_request(prompt_ids, args.mode, args.max_new_tokens, args.num_samples)  # before anything is printed
    streamer = _Streamer(tokenizer, prompt_ids) if args.num_samples == 1 else None
    with fits_in_memory(f"sampling {args.num_samples:,} texts of {args.max_new_tokens} tokens", device):
        new = generate(model, prompt_ids, mode=args.mode, decoding=decoding, max_new_tokens=args.max_new_tokens,
                       num_samples=args.num_samples, generator=make_generator(args.seed, device), on_token=streamer)
    if streamer is not None:
        sys.stdout.write("\n")
        return
    for i, ids in enumerate(new.tolist(), start=1):
        print(f"--- sample {i} ({args.mode}, {decoding.describe()}) ---")
        print(tokenizer.decode(prompt_ids + ids))


if __name__ == "__main__":
    run_main(main)
