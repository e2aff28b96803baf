"""rnnlm: recurrent language models written by hand in PyTorch, trained and measured by DVC."""
