"""A model's architecture as a checkpoint stores it (`ModelConfig`), and where it comes from.

A params.yaml entry names its model's kind (`kind:`, recurrent when left out) and, for a recurrent
model, its cell from the registry (`rnnlm.models.cells.CELLS`: the model is a stack of that cell's
layers); the other kind is `WINDOW_MLP`, the fixed-window MLP. `ModelParams.model_config(vocab_size)`
gives the config; `rnnlm.models.kinds` maps each kind to its model class. The stored form keeps one
field for both, `cell` (a cell's name, or `mlp`), as every checkpoint since the first holds it;
`ModelConfig.kind` reads the kind back from it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from rnnlm.errors import RnnlmError

WINDOW_MLP = "mlp"
"""The `cell:` value of the fixed-window MLP (Bengio et al., 2003), a model kind rather than a cell."""

RECURRENT = "recurrent"


@dataclass(frozen=True)
class ModelConfig:
    """Everything needed to rebuild a model's architecture (a checkpoint stores it as a dict)."""

    cell: str  # a registered recurrent cell, or WINDOW_MLP
    vocab_size: int
    embd: int
    hidden: int
    layers: int
    dropout: float = 0.0
    dropout_mode: str = "state"
    layer_norm: bool = False
    window: int = 0  # the fixed-window MLP only: how many tokens it sees

    @property
    def kind(self) -> str:
        """RECURRENT for a stack of recurrent cells, else the model kind `cell` names (WINDOW_MLP)."""
        return WINDOW_MLP if self.cell == WINDOW_MLP else RECURRENT

    def to_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, object]) -> ModelConfig:
        fields = dataclasses.fields(cls)
        required = {f.name for f in fields if f.default is dataclasses.MISSING}
        names = {f.name for f in fields}
        if not isinstance(raw, dict) or not required <= set(raw) <= names:
            raise RnnlmError(f"model config {raw!r}: expected the keys {sorted(names)}")
        for key in ("vocab_size", "embd", "hidden", "layers", "window"):
            value = raw.get(key, 1)
            if not isinstance(value, int) or isinstance(value, bool) or value < (0 if key == "window" else 1):
                raise RnnlmError(f"model config {key} {value!r}: expected a positive whole number")
        if not isinstance(raw["cell"], str) or not isinstance(raw.get("dropout", 0.0), (int, float)) \
                or not 0 <= raw.get("dropout", 0.0) < 1:
            raise RnnlmError(f"model config {raw!r}: expected a cell name and a dropout in [0, 1)")
        return cls(**raw)  # type: ignore[arg-type]

