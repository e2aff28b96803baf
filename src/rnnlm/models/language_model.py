"""The recurrent language model: embedding, stacked recurrent layers, optional LayerNorm, output.

One interface for every model (`rnnlm.models.kinds`): `forward(tokens (B, T), state=None) ->
(logits (B, T, V), state)`. The state is a tuple with one entry per layer (`rnnlm.models.state`);
None means zeros. Stateless sampling calls it with `state=None` on the last token; stateful sampling
feeds the prompt once and then one token at a time, passing the returned state back in.
"""

from __future__ import annotations

import math

import torch.nn.functional as F
from torch import Tensor, nn

from rnnlm.errors import ParamsError
from rnnlm.models.cells import CELLS
from rnnlm.models.config import ModelConfig
from rnnlm.compute.layer_norm import layer_norm
from rnnlm.compute.products import linear
from rnnlm.models.state import ModelState


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
        `last_only`: the logits of the last step alone, (B, 1, V), for a caller that reads only the
        next token's distribution (the context curve), without the output product at every step.

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
        if self.norm is not None:  # its gradients the same at any thread count (compute/layer_norm.py)
            x = layer_norm(x, self.norm.weight, self.norm.bias, self.norm.eps)
        return linear(x, self.head.weight, self.head.bias).transpose(0, 1), tuple(new_state)  # (B, T, V)

    def first_layer_table(self) -> Tensor:
        """(V, G*H): row v is token v's embedding times the first layer's input matrix."""
        return linear(self.embedding.weight, self.layers[0].cell.weight_ih)

    def description(self) -> list[str]:
        """What the model is, in words, for `rnnlm.models.kinds.summary`."""
        c = self.config
        where = "between layers" if c.dropout_mode == "between" else "on the carried state"
        return [f"{c.cell.upper()} language model, {c.layers} layer(s), embedding {c.embd}, hidden {c.hidden}, "
                f"vocabulary {c.vocab_size}",
                f"dropout {c.dropout} ({where})" + (", LayerNorm before the output" if c.layer_norm else ""),
                "architecture: Embedding -> " + " -> ".join(type(layer).__name__ for layer in self.layers)
                + (" -> LayerNorm" if c.layer_norm else "") + " -> Linear"]
