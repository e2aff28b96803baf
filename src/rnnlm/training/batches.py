"""Where a run's batches come from: random windows (the study's recipe), contiguous streams (`train.state:
carried`), and the study's one random validation batch per epoch.

In:  a token sequence (int64), the batch size, the window length and a seed.
Out: `batches(n)`: n batches at once, inputs and targets (n, B, T), the targets shifted by one
     token, each sampler drawing from a generator of its own (so what one draws changes nothing
     another draws).
"""

from __future__ import annotations

import hashlib

import torch
from torch import Tensor

from rnnlm.errors import TrainingError


class WindowSampler:
    """Random (inputs, targets) windows of a token sequence, from its own seeded generator."""

    def __init__(self, tokens: Tensor, batch_size: int, seq_len: int, seed: int):
        if tokens.numel() < seq_len + 1:
            raise TrainingError(
                f"the training split has {tokens.numel()} tokens; train.seq_len {seq_len} needs at least {seq_len + 1}"
            )
        self.tokens, self.batch_size, self.seq_len = tokens, batch_size, seq_len
        self.generator = torch.Generator().manual_seed(seed)
        self._offsets = torch.arange(seq_len + 1)

    def batches(self, n: int) -> tuple[Tensor, Tensor]:
        """n batches at once: x, y (n, B, T), y being x shifted by one token. The same windows as n
        draws of one batch each (the generator draws the starts in order either way)."""
        starts = torch.randint(self.tokens.numel() - self.seq_len, (n, self.batch_size), generator=self.generator)
        chunk = self.tokens[starts[..., None] + self._offsets]  # (n, B, T + 1)
        return chunk[..., :-1], chunk[..., 1:]


class StreamSampler:
    """The `train.state: carried` recipe's batches: the token sequence cut into `batch_size`
    contiguous streams, row b of each batch the next window of `seq_len` tokens of stream b, read in
    order; after the last whole window the streams start again from their beginning (`fresh`: the
    state must be reset there). Where a run starts in the streams is drawn from its seed."""

    def __init__(self, tokens: Tensor, batch_size: int, seq_len: int, seed: int):
        length = tokens.numel() // batch_size
        if length < seq_len + 1:
            raise TrainingError(f"the training split has {tokens.numel()} tokens: {batch_size} streams of {length}, "
                                f"shorter than train.seq_len {seq_len} + 1; expected a longer split or a smaller batch")
        self.streams = tokens[: batch_size * length].view(batch_size, length)  # (B, L)
        self.seq_len, self.windows = seq_len, (length - 1) // seq_len  # whole windows per pass
        self.generator = torch.Generator().manual_seed(seed)
        self.position = int(torch.randint(self.windows, (1,), generator=self.generator))  # the next window
        self.fresh: list[bool] = []

    def batches(self, n: int) -> tuple[Tensor, Tensor]:
        """The next n batches: x, y (n, B, T); `fresh[i]` says whether batch i starts a pass."""
        index = (self.position + torch.arange(n)) % self.windows  # (n,)
        starts = index[:, None] * self.seq_len + torch.arange(self.seq_len + 1)  # (n, T + 1)
        chunk = self.streams[:, starts].permute(1, 0, 2)  # (n, B, T + 1)
        self.fresh = (index == 0).tolist()
        self.position = int((self.position + n) % self.windows)
        return chunk[..., :-1], chunk[..., 1:]


def val_batch_seed(seed: int) -> int:
    """The seed of the generator that draws the study's validation batch each epoch: derived from
    `seed` but its own stream, so drawing it changes nothing that training draws."""
    return int.from_bytes(hashlib.sha256(f"study validation batch {seed}".encode()).digest()[:8], "little") >> 1
