"""The corpus (download, checksum, split, vocabulary) and the two tokenizers (characters, SentencePiece)."""
