"""DVC stage `tokenizer`: train the SentencePiece model on the training split only.

Usage: python stages/tokenizer.py TRAIN_TEXT OUT_DIR
Writes OUT_DIR/spm.model, which round-trips text exactly (see rnnlm.data.tokenizers).
"""


from rnnlm.data.corpus import read_corpus
from rnnlm.command_line import command_args, run_main
from rnnlm.params_base import TokenizerParams, load_section
from rnnlm.data.tokenizers import SentencePieceTokenizer, train_sentencepiece, write_sentencepiece


def main() -> None:
    train_text, out_dir = command_args(__doc__)
    settings = load_section("tokenizer", TokenizerParams)
    model_proto = train_sentencepiece(read_corpus(train_text), settings)
    path = write_sentencepiece(model_proto, out_dir)
    print(f"wrote {path}: {SentencePieceTokenizer(model_proto).vocab_size} pieces")


if __name__ == "__main__":
    run_main(main)
