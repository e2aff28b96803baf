"""DVC stage `download`: fetch the corpus named by params `data.url`, checksum-pinned.

Usage: python stages/download.py OUT_FILE
If the environment variable RNNLM_CORPUS_MIRROR names a local copy (path or file:// URL), it is
tried first and held to the same sha256.
"""

import os

from rnnlm.data.corpus import MIRROR_ENV, fetch_corpus
from rnnlm.command_line import command_args, run_main
from rnnlm.params_base import DataParams, load_section


def main() -> None:
    (out_file,) = command_args(__doc__)
    data = load_section("data", DataParams)
    source = fetch_corpus(data.url, data.sha256, out_file, mirror=os.environ.get(MIRROR_ENV))
    print(f"wrote {out_file} from {source}")


if __name__ == "__main__":
    run_main(main)
