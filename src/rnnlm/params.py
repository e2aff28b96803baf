"""Load params.yaml into frozen dataclasses, refusing anything that is not exactly right.

In:  a path to params.yaml (or an already parsed mapping).
Out: a `Params` tree. Every unknown key, missing key, wrong type or impossible value raises
`ParamsError` with one line naming the key path and what was expected, for example
`models.astra_beta.lr: expected a finite positive number, got -0.1`; stages turn it into exit status 2.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, get_type_hints

import yaml

from rnnlm.errors import ParamsError
from rnnlm.models.cells import CELLS
from rnnlm.models.config import WINDOW_MLP

# ---------------------------------------------------------------------------------------------
# Field specifications: the Python type a value must have, a predicate, and the words for it.


def _spec(kind: type, expected: str | Callable[[], str], ok: Callable[[Any], bool] = lambda value: True,
          omitted_at_default: bool = False, **default: Any) -> Any:
    """A field; with `default=...` it may be left out of params.yaml. `omitted_at_default`: a setting
    added after runs were made, left out of `as_dict` (checkpoints, run fingerprints) while it holds
    its default, so those runs' bytes and resume files stay what they were."""
    return field(metadata={"kind": kind, "expected": expected, "ok": ok, "omitted_at_default": omitted_at_default},
                 **default)


def positive_int() -> Any:
    return _spec(int, "a positive integer", lambda v: v > 0)


def non_negative_int() -> Any:
    return _spec(int, "a non-negative integer", lambda v: v >= 0)


SEED_MAX = 2**64 - 1
"""The largest seed PyTorch's generators take: they hold an unsigned 64-bit integer."""
SEED_EXPECTED = "an integer from 0 to 2**64 - 1"


def seed_in_range(value: int) -> bool:
    """Whether `value` is a seed every generator the pipeline seeds with it accepts."""
    return 0 <= value <= SEED_MAX


def seed() -> Any:
    return _spec(int, SEED_EXPECTED, seed_in_range)


def positive_float() -> Any:
    return _spec(float, "a finite positive number", lambda v: 0 < v < math.inf)


def non_negative_float() -> Any:
    return _spec(float, "a finite non-negative number", lambda v: 0 <= v < math.inf)


def open_fraction() -> Any:
    return _spec(float, "a number strictly between 0 and 1", lambda v: 0 < v < 1)


def probability_below_one() -> Any:
    return _spec(float, "a number in [0, 1)", lambda v: 0 <= v < 1)


def choice(*options: str) -> Any:
    words = ", ".join(repr(o) for o in options)
    return _spec(str, f"one of {words}", lambda v: v in options)


def cell_names() -> tuple[str, ...]:
    """The values of a model's `cell:`: the registered recurrent cells and the fixed-window MLP's
    name (read from the registry without importing the cells, or PyTorch)."""
    return (*CELLS, WINDOW_MLP)


def text(expected: str = "a non-empty string", ok: Callable[[Any], bool] = bool) -> Any:
    return _spec(str, expected, ok)


def flag() -> Any:
    return _spec(bool, "true or false")


def text_list() -> Any:
    """A non-empty list of non-empty strings, stored as a tuple."""
    return _spec(
        list, "a non-empty list of non-empty strings", lambda v: bool(v) and all(isinstance(s, str) and s for s in v)
    )


# ---------------------------------------------------------------------------------------------
# The schema. Field order here is the order users see in error messages.


@dataclass(frozen=True)
class DataParams:
    """Where the corpus comes from and how it is split."""

    url: str = text("an https:// URL, a file:// URL or a path")
    sha256: str = text(
        "64 lowercase hex digits", lambda v: re.fullmatch(r"[0-9a-f]{64}", v) is not None
    )
    train_fraction: float = open_fraction()


@dataclass(frozen=True)
class TokenizerParams:
    """SentencePiece settings for the subword (Scribe) models."""

    vocab_size: int = _spec(int, "an integer of at least 16", lambda v: v >= 16)
    model_type: str = choice("unigram", "bpe")
    character_coverage: float = _spec(float, "a number in (0, 1]", lambda v: 0 < v <= 1)


@dataclass(frozen=True)
class TrainParams:
    """Training settings shared by every model."""

    batch_size: int = positive_int()
    seq_len: int = _spec(int, "an integer of at least 2", lambda v: v >= 2)
    weight_decay: float = non_negative_float()
    grad_clip: float = positive_float()
    device: str = choice("auto", "cpu", "cuda")
    steps_scale: float = positive_float()
    # The host reads the step losses (and checks them) once every this many steps.
    check_every: int = _spec(int, "a positive integer", lambda v: v > 0, default=50)
    # CUDA only: each training step replayed as one captured CUDA graph; TF32 matrix products.
    cuda_graph: bool = _spec(bool, "true or false", default=True)
    allow_tf32: bool = _spec(bool, "true or false", default=False)
    # reset: random windows, each from a zero state (the study's recipe). carried: the split cut into
    # batch_size contiguous streams read window after window in order, the state carried (detached)
    # from one window into the next and reset at each epoch's start (rnnlm.training.train).
    state: str = _spec(str, "one of 'reset', 'carried'", lambda v: v in TRAIN_STATES, default="reset",
                       omitted_at_default=True)


TRAIN_STATES = ("reset", "carried")


@dataclass(frozen=True)
class ModelTraining:
    """What a model entry overrides of the shared `train:` settings (nothing by default)."""

    state: str | None = _spec(str, "one of 'reset', 'carried'", lambda v: v in TRAIN_STATES, default=None,
                              omitted_at_default=True)


@dataclass(frozen=True)
class ModelParams:
    """One entry of `models:`: architecture and its own optimisation schedule."""

    tokens: str = choice("char", "sentencepiece")
    # a registered recurrent cell (rnnlm.models.cells.CELLS), or "mlp", the fixed-window model
    cell: str = _spec(str, lambda: "one of " + ", ".join(map(repr, cell_names())), lambda v: v in cell_names())
    embd: int = positive_int()
    hidden: int = positive_int()
    layers: int = positive_int()
    dropout: float = probability_below_one()
    dropout_mode: str = choice("state", "between")
    layer_norm: bool = flag()
    epochs: int = positive_int()
    steps_per_epoch: int = positive_int()
    lr: float = positive_float()
    # Only for `cell: mlp`, the fixed-window model: how many tokens it sees (the last one included).
    window: int = _spec(int, "a non-negative integer", lambda v: v >= 0, default=0)
    # This entry's own training settings over `train:` (`train: {state: carried}`); none by default.
    train: ModelTraining = field(default=ModelTraining(), metadata={"omitted_at_default": True})


@dataclass(frozen=True)
class GenerateParams:
    """What the generation report samples: every prompt, with every strategy, in both modes."""

    prompts: tuple[str, ...] = text_list()
    max_new_tokens: int = positive_int()
    temperature: float = positive_float()
    top_k: int = positive_int()
    top_k_temperature: float = positive_float()
    top_p: float = _spec(float, "a number in (0, 1]", lambda v: 0 < v <= 1)
    top_p_temperature: float = positive_float()


@dataclass(frozen=True)
class EvaluateParams:
    """The measures of the evaluate stage."""

    reset_every: tuple[int, ...] = _spec(
        list, "a non-empty list of positive integers",
        lambda v: bool(v) and all(isinstance(k, int) and not isinstance(k, bool) and k > 0 for k in v),
    )
    ngram_max_order: int = _spec(int, "an integer from 2 to 8", lambda v: 2 <= v <= 8)
    ngram_discount: float = open_fraction()
    context_lengths: tuple[int, ...] = _spec(
        list, "a non-empty list of positive integers",
        lambda v: bool(v) and all(isinstance(k, int) and not isinstance(k, bool) and k > 0 for k in v),
    )
    context_targets: int = positive_int()
    horizon_tolerance: float = positive_float()


@dataclass(frozen=True)
class Params:
    """The whole of params.yaml. `selected` is the entry that `model:` names."""

    model: str = text("the name of an entry under models:")
    seed: int = seed()
    data: DataParams
    tokenizer: TokenizerParams
    train: TrainParams
    generate: GenerateParams
    evaluate: EvaluateParams
    models: Mapping[str, ModelParams]

    @property
    def selected(self) -> ModelParams:
        return self.models[self.model]


# ---------------------------------------------------------------------------------------------
# Loading.


class _Yaml12Loader(yaml.SafeLoader):
    """PyYAML's safe loader, reading `3e-3` as a float as YAML 1.2 (and so DVC) does."""


_Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |\.[0-9_]+(?:[eE][-+][0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def _describe(value: Any) -> str:
    return "nothing" if value is None else repr(value)


def _check_value(path: str, value: Any, meta: Mapping[str, Any]) -> Any:
    kind, expected, ok = meta["kind"], meta["expected"], meta["ok"]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    type_ok = isinstance(value, kind) and (kind is bool or not isinstance(value, bool))
    if not type_ok or not ok(value):
        expected = expected() if callable(expected) else expected  # words made when needed (the cell names)
        raise ParamsError(f"{path}: expected {expected}, got {_describe(value)}")
    return tuple(value) if kind is list else value


def _build(cls: type, raw: Any, path: str) -> Any:
    """Build dataclass `cls` from mapping `raw`, checking keys and values; `path` prefixes errors."""
    where = f"{path}: " if path else ""
    if not isinstance(raw, Mapping):
        raise ParamsError(f"{where or 'params: '}expected a mapping of keys, got {_describe(raw)}")
    fields = dataclasses.fields(cls)
    names = [f.name for f in fields]
    for key in raw:
        if key not in names:
            raise ParamsError(
                f"{path + '.' if path else ''}{key}: unknown key; expected one of {', '.join(names)}"
            )
    hints = get_type_hints(cls)
    values = {}
    for f in fields:
        sub = f"{path}.{f.name}" if path else f.name
        if f.name not in raw and f.default is not dataclasses.MISSING:
            values[f.name] = f.default
            continue
        if f.name not in raw:
            expected = f.metadata.get("expected", "a mapping")
            raise ParamsError(f"{sub}: missing; expected {expected}")
        hint = hints[f.name]
        if dataclasses.is_dataclass(hint):
            values[f.name] = _build(hint, raw[f.name], sub)
        elif f.name == "models":
            values[f.name] = _build_models(raw[f.name], sub)
        else:
            values[f.name] = _check_value(sub, raw[f.name], f.metadata)
    return cls(**values)


def _build_models(raw: Any, path: str) -> Mapping[str, ModelParams]:
    if not isinstance(raw, Mapping) or not raw:
        raise ParamsError(f"{path}: expected a non-empty mapping of model names, got {_describe(raw)}")
    models = {str(name): _build(ModelParams, block, f"{path}.{name}") for name, block in raw.items()}
    for name, model in models.items():
        if model.cell == WINDOW_MLP and model.window < 1:
            raise ParamsError(f"{path}.{name}.window: expected a positive integer for cell {WINDOW_MLP!r}, got "
                              f"{model.window}")
        if model.cell != WINDOW_MLP and model.window != 0:
            raise ParamsError(f"{path}.{name}.window: only cell {WINDOW_MLP!r} has a window; remove it for cell "
                              f"{model.cell!r}")
        if model.cell == WINDOW_MLP and model.train.state == "carried":
            raise ParamsError(f"{path}.{name}.train.state: 'carried' needs a recurrent cell; cell {WINDOW_MLP!r} "
                              f"has no state to carry")
    return MappingProxyType(models)


def training_settings(params: Params, name: str) -> TrainParams:
    """The `train:` settings of model `name`: the shared ones with its entry's own over them."""
    own = {key: value for key, value in as_dict(params.models[name].train).items() if value is not None}
    return dataclasses.replace(params.train, **own)


def model_entry(raw: Any, path: str = "model") -> ModelParams:
    """One entry of `models:` (as a run's own params.yaml holds it), validated into `ModelParams`."""
    return _build(ModelParams, raw, path)


def parse_params(raw: Any) -> Params:
    """Validate an already parsed params mapping into `Params`."""
    params = _build(Params, raw, "")
    select_model(params, params.model)
    return params


def load_params(path: str | Path = "params.yaml") -> Params:
    """Read and validate params.yaml at `path`."""
    path = Path(path)
    try:
        raw = yaml.load(path.read_text(encoding="utf-8"), Loader=_Yaml12Loader)
    except FileNotFoundError as error:
        raise ParamsError(f"{path}: no such file; expected params.yaml at the repository root") from error
    except yaml.YAMLError as error:
        first = str(error).splitlines()[0]
        raise ParamsError(f"{path}: not valid YAML ({first})") from error
    return parse_params(raw)


def select_model(params: Params, name: str) -> ModelParams:
    """The entry `name` of `models:` (the argv of a stage), or a ParamsError listing the valid ones."""
    if name not in params.models:
        raise ParamsError(f"model: {name!r} is not under models:; expected one of {', '.join(params.models)}")
    return params.models[name]


def as_dict(params: Any) -> Any:
    """A plain-dict copy of a params tree (for checkpoints and reports), without the settings marked
    `omitted_at_default` that hold their default."""
    if dataclasses.is_dataclass(params):
        return {f.name: as_dict(getattr(params, f.name)) for f in dataclasses.fields(params)
                if not (f.metadata.get("omitted_at_default") and getattr(params, f.name) == f.default)}
    if isinstance(params, Mapping):
        return {k: as_dict(v) for k, v in params.items()}
    if isinstance(params, tuple):
        return list(params)
    return params
