"""`python -m rnnlm.describe NAME`: print the layers and parameter breakdown of the entry NAME of
params.yaml (the vocabulary size from the prepared data when it exists)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rnnlm.data.corpus import read_vocabulary
from rnnlm.errors import ParamsError, UsageError
from rnnlm.command_line import run_main
from rnnlm.models.kinds import build_model, on_meta, summary
from rnnlm.params import ModelParams, load_params, select_model

TINY_SHAKESPEARE_CHARS = 65
"""The character vocabulary of Tiny Shakespeare, used when no prepared vocabulary is at hand."""


def _vocab_size(model: ModelParams, params_tokenizer_size: int, prepared: Path) -> tuple[int, str]:
    if model.tokens == "sentencepiece":
        return params_tokenizer_size, "tokenizer.vocab_size"
    vocab_file = prepared / "vocab.json"
    if vocab_file.exists():
        return len(read_vocabulary(prepared)), str(vocab_file)
    return TINY_SHAKESPEARE_CHARS, "Tiny Shakespeare's 65 characters (no prepared vocabulary found)"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m rnnlm.describe", description="Print a model's summary.")
    parser.add_argument("name", help="an entry of models: in params.yaml, e.g. astra_beta")
    parser.add_argument("--params", default="params.yaml", help="path to params.yaml")
    parser.add_argument("--prepared", default="data/prepared", help="prepared data folder (character vocabulary)")
    args = parser.parse_args(argv)
    params = load_params(args.params)
    entry = select_model(params, args.name)
    prepared = Path(args.prepared)
    if prepared.exists() and not prepared.is_dir():
        raise UsageError(f"--prepared {prepared}: not a folder; expected the prepare stage's output (data/prepared)")
    vocab_size, source = _vocab_size(entry, params.tokenizer.vocab_size, prepared)
    try:
        with on_meta():
            model = build_model(entry.model_config(vocab_size))
    except (RuntimeError, OverflowError) as error:
        raise ParamsError(f"models.{args.name}: a model of these sizes cannot be built ({str(error).splitlines()[0]}); "
                          "expected sizes whose weights can be counted") from None
    print(summary(model, args.name))
    print(f"vocabulary size from: {source}")


if __name__ == "__main__":
    run_main(main)
