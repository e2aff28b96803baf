"""The generations file (reports/generations.json): what the generate stage writes and the evaluate
and report stages read. Plain data, no PyTorch, so that reading it costs no `import torch`.

A `GenerationRun` holds the model's name, the checkpoint's identity, the sampling settings and one
`Sample` per prompt, strategy and mode.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rnnlm.errors import RnnlmError


@dataclass(frozen=True)
class Sample:
    prompt: str
    strategy: str
    decoding: str
    mode: str
    text: str
    new_tokens: int


@dataclass
class GenerationRun:
    model: str
    checkpoint: dict[str, Any]
    settings: dict[str, Any]
    samples: list[Sample] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, ensure_ascii=False) + "\n"

    @classmethod
    def from_json(cls, text: str) -> GenerationRun:
        raw = json.loads(text)
        raw["samples"] = [Sample(**s) for s in raw["samples"]]
        return cls(**raw)


def read_generations(path: str | Path) -> GenerationRun:
    """A `GenerationRun` saved by the generate stage."""
    try:
        return GenerationRun.from_json(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise RnnlmError(f"{path}: cannot read the generations ({error}); run the generate stage") from error
