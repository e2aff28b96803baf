"""DVC stage `prepare`: split the corpus and list its characters.

Usage: python stages/prepare.py CORPUS_FILE OUT_DIR
Writes OUT_DIR/train.txt and OUT_DIR/val.txt (the first `data.train_fraction` of the characters and
the rest) and OUT_DIR/vocab.json (the sorted characters of the whole corpus, and the counts).
"""


from rnnlm.data.corpus import character_vocabulary, read_corpus, split_corpus, write_prepared
from rnnlm.command_line import command_args, run_main
from rnnlm.params_base import DataParams, load_section


def main() -> None:
    corpus_file, out_dir = command_args(__doc__)
    data = load_section("data", DataParams)
    text = read_corpus(corpus_file)
    split = split_corpus(text, data.train_fraction)
    vocabulary = character_vocabulary(text)
    write_prepared(split, vocabulary, out_dir)
    print(f"train {len(split.train):,} chars, validation {len(split.val):,} chars, {len(vocabulary)} symbols")


if __name__ == "__main__":
    run_main(main)
