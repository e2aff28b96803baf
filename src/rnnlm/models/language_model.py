"""The recurrent language model: embedding, stacked recurrent layers, optional LayerNorm, output;
and the LayerNorm whose gradients do not depend on the thread count.

One interface for every model (`rnnlm.models.kinds`): `forward(tokens (B, T), state=None) ->
(logits (B, T, V), state)`. The state is a tuple with one entry per layer (`rnnlm.models.cells.base`);
None means zeros. Stateless sampling calls it with `state=None` on the last token; stateful sampling
feeds the prompt once and then one token at a time, passing the returned state back in.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rnnlm.errors import ParamsError
from rnnlm.models.cells import CELLS
from rnnlm.models.config import ModelConfig
from rnnlm.compute.products import linear
from rnnlm.models.cells.base import ModelState


class RecurrentLM(nn.Module):
    """Embedding -> recurrent layers -> (LayerNorm) -> Linear, at every time step."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        if config.cell not in CELLS:
            raise ParamsError(f"cell: expected one of {', '.join(CELLS)}, got {config.cell!r}")
        self.config = config
        layer_class = CELLS[config.cell].layer
        drop_state = config.dropout_mode == "state"
        self.embedding = nn.Embedding(config.vocab_size, config.embd)
        self.layers = nn.ModuleList(
            layer_class(config.embd if i == 0 else config.hidden, config.hidden, config.dropout, drop_state)
            for i in range(config.layers)
        )
        # In "between" mode only the outputs handed from one layer to the next are dropped.
        self.between = nn.Dropout(config.dropout) if not drop_state and config.dropout > 0 else None
        self.norm = nn.LayerNorm(config.hidden) if config.layer_norm else None
        self.head = nn.Linear(config.hidden, config.vocab_size)

    @staticmethod
    def parameter_count(config: ModelConfig) -> int:
        """The parameters `config` describes, from each part's declared shapes (the cell's own
        `parameter_shapes`), without building anything: the embedding, the layers, the LayerNorm's
        gain and bias, the head's weight and bias."""
        cell = CELLS[config.cell].layer.cell_class
        layers = sum(math.prod(shape) for i in range(config.layers) for shape in
                     cell.parameter_shapes(config.embd if i == 0 else config.hidden, config.hidden).values())
        norm = 2 * config.hidden if config.layer_norm else 0
        return config.vocab_size * config.embd + layers + norm + (config.hidden + 1) * config.vocab_size

    def forward(self, tokens: Tensor, state: ModelState | None = None,
                last_only: bool = False) -> tuple[Tensor, ModelState]:
        """tokens (B, T) int64, state per layer or None -> logits (B, T, V), new state per layer;
        `last_only`: the logits of the last time step alone, (B, 1, V), for a caller that reads only the
        next token's distribution (the context curve), without the output product at every time step.

        Runs time-major inside (the logits are a (B, T, V) view of (T, B, V) memory). The embedding
        and the first layer's input matrix are applied as one table of V rows, `first_layer_table`:
        the same function as embedding then product, without a product over all B*T tokens.
        """
        if state is not None and len(state) != len(self.layers):
            raise ValueError(f"state has {len(state)} layers, the model {len(self.layers)}")
        x = None
        new_state = []
        for i, layer in enumerate(self.layers):
            if i == 0:
                products = F.embedding(tokens.T, self.first_layer_table())  # (T, B, G*H)
            else:
                products = layer.input_products(x)
            x, layer_state = layer.scan(products, None if state is None else state[i])  # (T, B, H)
            new_state.append(layer_state)
            if self.between is not None and i < len(self.layers) - 1:
                x = self.between(x)
        if last_only:
            x = x[-1:]  # (1, B, H)
        if self.norm is not None:  # its gradients the same at any thread count (`layer_norm` below)
            x = layer_norm(x, self.norm.weight, self.norm.bias, self.norm.eps)
        return linear(x, self.head.weight, self.head.bias).transpose(0, 1), tuple(new_state)  # (B, T, V)

    def first_layer_table(self) -> Tensor:
        """(V, G*H): row v is token v's embedding times the first layer's input matrix."""
        return linear(self.embedding.weight, self.layers[0].cell.weight_ih)

    def description(self) -> list[str]:
        """What the model is, in words, for `rnnlm.models.kinds.summary`."""
        c = self.config
        where = "between layers" if c.dropout_mode == "between" else "on the state passed to the next time step"
        return [f"{c.cell.upper()} language model, {c.layers} layer(s), embedding {c.embd}, hidden {c.hidden}, "
                f"vocabulary {c.vocab_size}",
                f"dropout {c.dropout} ({where})" + (", LayerNorm before the output" if c.layer_norm else ""),
                "architecture: Embedding -> " + " -> ".join(type(layer).__name__ for layer in self.layers)
                + (" -> LayerNorm" if c.layer_norm else "") + " -> Linear"]


# ------------------------------------------------------------------ LayerNorm
# PyTorch's CPU LayerNorm backward sums the weight's and the bias's gradients over the rows in one
# partial sum per thread, then adds the partials: the same run gives other last bits at another
# thread count. It is the only operation of our training step that does (every cell, the products,
# the loss, the clipping norm and AdamW give the same bits at one thread and at two;
# tests/test_threads.py checks), and it would stop a run from changing its thread count as other
# runs come and go without changing its checkpoint (`rnnlm.compute.threads`). So `layer_norm`
# computes the forward pass with PyTorch's own kernel (the same bits as `F.layer_norm`) and, on the
# CPU, the backward pass with PyTorch's kernel for the input's gradient (one row at a time, whatever
# the threads) and column sums for the weight's and bias's gradients (a sum over the leading
# dimension splits over the columns, never inside one). On other devices it is `F.layer_norm`.

class _LayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
        y, mean, rstd = torch.native_layer_norm(x, weight.shape, weight, bias, eps)  # mean, rstd (..., 1)
        ctx.save_for_backward(x, weight, bias, mean, rstd)
        return y

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, weight, bias, mean, rstd = ctx.saved_tensors
        dx, _, _ = torch.ops.aten.native_layer_norm_backward(grad, x, weight.shape, mean, rstd, weight, bias,
                                                             [True, False, False])
        width = x.shape[-1]
        rows, grads = x.reshape(-1, width), grad.reshape(-1, width)  # (N, H)
        normalized = (rows - mean.reshape(-1, 1)) * rstd.reshape(-1, 1)  # (N, H)
        return dx, (grads * normalized).sum(0), grads.sum(0), None


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    """LayerNorm over the last dimension of x (..., H) with weight and bias (H,); see the module."""
    if x.device.type != "cpu" or not torch.is_grad_enabled():
        return F.layer_norm(x, weight.shape, weight, bias, eps)
    return _LayerNorm.apply(x, weight, bias, eps)
