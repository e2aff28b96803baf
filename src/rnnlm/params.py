"""Load params.yaml into frozen dataclasses, refusing anything that is not exactly right: the whole
file, every section (the data stages read theirs alone, `rnnlm.params_base.load_section`).

In:  a path to params.yaml (or an already parsed mapping).
Out: a `Params` tree. Every unknown key, missing key, wrong type or impossible value raises
`ParamsError` with one line naming the key path and what was expected, for example
`models.astra_beta.lr: expected a finite positive number, got -0.1`; stages turn it into exit status 2.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from rnnlm.errors import ParamsError
from rnnlm.models.cells import CELLS
from rnnlm.models.config import RECURRENT, WINDOW_MLP, ModelConfig
from rnnlm.params_base import (DataParams, TokenizerParams, build, choice, describe_value, flag, non_negative_float,
                               open_fraction, positive_float, positive_int, probability_below_one, read_yaml, seed,
                               setting, text, text_list)

# ---------------------------------------------------------------------------------------------
# The schema of the rest (data and tokenizer: rnnlm.params_base). Field order here is the order
# users see in error messages.


MODEL_KINDS = (RECURRENT, WINDOW_MLP)
"""The values of a model's `kind:`: a stack of recurrent cells (the default), or the fixed-window MLP."""


MAX_TRAINING_STEPS = 1_000_000
"""The most optimizer steps a model entry may ask for in all (epochs x steps_per_epoch): 125 times the
longest schedule of the study (astra_gamma's 8,000). A value past it is a typing slip, and DVC would
have deleted the checkpoint before a training that never ends."""

MAX_NEW_TOKENS = 100_000
"""The most tokens `generate.max_new_tokens` may ask for per sample: 500 times the study's 200 (every
prompt, strategy and mode samples that many)."""

MAX_CONTEXT_TARGETS = 100_000
"""The most `evaluate.context_targets`: 50 times the 2,000 chosen here, and about as many as the
validation split has positions (each target is scored once per context length)."""


def cell_names() -> tuple[str, ...]:
    """The values of a recurrent model's `cell:`: the registered cells (read from the registry
    without importing them, or PyTorch)."""
    return tuple(CELLS)


@dataclass(frozen=True)
class TrainParams:
    """Training settings shared by every model."""

    batch_size: int = positive_int()
    seq_len: int = setting(int, "an integer of at least 2", lambda v: v >= 2)
    weight_decay: float = non_negative_float()
    grad_clip: float = positive_float()
    device: str = choice("auto", "cpu", "cuda")
    # The share of each entry's steps per epoch a run takes: 1 for the study, less for a quick run.
    steps_scale: float = setting(float, "a number in (0, 1]", lambda v: steps_scale_ok(v))
    # The host reads the step losses (and checks them) once every this many steps.
    check_every: int = setting(int, "a positive integer", lambda v: v > 0, default=50)
    # CUDA only: each training step replayed as one captured CUDA graph; TF32 matrix products.
    cuda_graph: bool = setting(bool, "true or false", default=True)
    allow_tf32: bool = setting(bool, "true or false", default=False)
    # reset: random windows, each from a zero state (the study's recipe). carried: the split cut into
    # batch_size contiguous streams read window after window in order, the state carried (detached)
    # from one window into the next and reset at each epoch's start (rnnlm.training.train).
    state: str = setting(str, "one of 'reset', 'carried'", lambda v: v in TRAIN_STATES, default="reset",
                       omitted_at_default=True)


TRAIN_STATES = ("reset", "carried")


def steps_scale_ok(value: float) -> bool:
    """Whether `value` can be `train.steps_scale` (or `study run --steps-scale`): in (0, 1]. A larger
    one would train past the study's schedule (1e300 asked for epochs of 2e302 steps)."""
    return 0 < value <= 1


@dataclass(frozen=True)
class ModelTraining:
    """What a model entry overrides of the shared `train:` settings (nothing by default)."""

    state: str | None = setting(str, "one of 'reset', 'carried'", lambda v: v in TRAIN_STATES, default=None,
                              omitted_at_default=True)


@dataclass(frozen=True, kw_only=True)
class ModelParams:
    """One entry of `models:`: architecture and its own optimisation schedule."""

    tokens: str = choice("char", "sentencepiece")
    # what the model is: a stack of recurrent cells ("recurrent", the default, left unwritten) or the
    # fixed-window MLP ("mlp"); a model kind's class is rnnlm.models.kinds.MODELS[kind]
    kind: str = setting(str, "one of " + ", ".join(map(repr, MODEL_KINDS)), lambda v: v in MODEL_KINDS,
                        default=RECURRENT, omitted_at_default=True)
    # a recurrent model's cell, from the registry (rnnlm.models.cells.CELLS); none for another kind
    cell: str | None = setting(str, lambda: "one of " + ", ".join(map(repr, cell_names())),
                               lambda v: v in cell_names(), default=None, omitted_at_default=True)
    embd: int = positive_int()
    hidden: int = positive_int()
    layers: int = positive_int()
    dropout: float = probability_below_one()
    dropout_mode: str = choice("state", "between")
    layer_norm: bool = flag()
    epochs: int = positive_int()
    steps_per_epoch: int = positive_int()
    lr: float = positive_float()
    # Only for `kind: mlp`, the fixed-window model: how many tokens it sees (the last one included).
    window: int = setting(int, "a non-negative integer", lambda v: v >= 0, default=0)
    # This entry's own training settings over `train:` (`train: {state: carried}`); none by default.
    train: ModelTraining = field(default=ModelTraining(), metadata={"omitted_at_default": True})

    @property
    def config_cell(self) -> str:
        """What a checkpoint's config stores as `cell`: the recurrent cell, or the kind of a model that
        has none (the fixed-window MLP is still `cell: "mlp"` there, so checkpoints of every commit
        read alike)."""
        return self.cell if self.kind == RECURRENT else self.kind

    def model_config(self, vocab_size: int) -> ModelConfig:
        """The architecture this entry describes, for a vocabulary of `vocab_size` (what a checkpoint stores)."""
        return ModelConfig(cell=self.config_cell, vocab_size=vocab_size, embd=self.embd, hidden=self.hidden,
                           layers=self.layers, dropout=self.dropout, dropout_mode=self.dropout_mode,
                           layer_norm=self.layer_norm, window=self.window)


@dataclass(frozen=True)
class GenerateParams:
    """What the generation report samples: every prompt, with every strategy, in both modes."""

    prompts: tuple[str, ...] = text_list()
    max_new_tokens: int = setting(int, f"an integer from 1 to {MAX_NEW_TOKENS:,}", lambda v: 0 < v <= MAX_NEW_TOKENS)
    temperature: float = positive_float()
    top_k: int = positive_int()
    top_k_temperature: float = positive_float()
    top_p: float = setting(float, "a number in (0, 1]", lambda v: 0 < v <= 1)
    top_p_temperature: float = positive_float()


@dataclass(frozen=True)
class EvaluateParams:
    """The measures of the evaluate stage."""

    reset_every: tuple[int, ...] = setting(
        list, "a non-empty list of positive integers",
        lambda v: bool(v) and all(isinstance(k, int) and not isinstance(k, bool) and k > 0 for k in v),
    )
    ngram_max_order: int = setting(int, "an integer from 2 to 8", lambda v: 2 <= v <= 8)
    ngram_discount: float = open_fraction()
    context_lengths: tuple[int, ...] = setting(
        list, "a non-empty list of positive integers",
        lambda v: bool(v) and all(isinstance(k, int) and not isinstance(k, bool) and k > 0 for k in v),
    )
    context_targets: int = setting(int, f"an integer from 1 to {MAX_CONTEXT_TARGETS:,}",
                                   lambda v: 0 < v <= MAX_CONTEXT_TARGETS)
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
    models: Mapping[str, ModelParams] = field(metadata={"build": lambda raw, path: _build_models(raw, path)})

    @property
    def selected(self) -> ModelParams:
        return self.models[self.model]


# ---------------------------------------------------------------------------------------------
# Checking the whole file.


MODEL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
"""A model's name: an identifier (it names folders, files and experiments: `reports/study/<name>/`,
`.resume/<name>-<key>.pt`, `<name>-seed<seed>`)."""

RESERVED_NAMES = frozenset({"quick"})
"""Names the study keeps for itself (`reports/study/quick/` holds the quick runs)."""


def _build_models(raw: Any, path: str) -> Mapping[str, ModelParams]:
    if not isinstance(raw, Mapping) or not raw:
        raise ParamsError(f"{path}: expected a non-empty mapping of model names, got {describe_value(raw)}")
    for name in raw:
        if not isinstance(name, str) or not MODEL_NAME.fullmatch(name) or name in RESERVED_NAMES:
            raise ParamsError(f"{path}.{name}: not a model name; expected letters, digits and underscores (not "
                              f"starting with a digit), and none of {', '.join(sorted(RESERVED_NAMES))}")
    return MappingProxyType({str(name): model_entry(block, f"{path}.{name}") for name, block in raw.items()})


def _first_spelling(raw: Any) -> Any:
    """An entry as the fixed-window MLP was first written (`cell: mlp`, before `kind:` existed: the
    study's run folders keep it) read as `kind: mlp`; any other entry as it is."""
    if isinstance(raw, Mapping) and raw.get("cell") == WINDOW_MLP and "kind" not in raw:
        return {("kind" if key == "cell" else key): value for key, value in raw.items()}
    return raw


def _check_kind(model: ModelParams, path: str) -> None:
    """What each kind needs: a recurrent model a cell and no window, the fixed-window MLP a window
    and no cell."""
    if model.kind == RECURRENT and model.cell is None:
        raise ParamsError(f"{path}.cell: expected one of {', '.join(map(repr, cell_names()))} for a recurrent "
                          f"model (or kind: {WINDOW_MLP!r})")
    if model.kind != RECURRENT and model.cell is not None:
        raise ParamsError(f"{path}.cell: only a recurrent model has a cell; remove it for kind {model.kind!r}")
    if model.kind == WINDOW_MLP and model.window < 1:
        raise ParamsError(f"{path}.window: expected a positive integer for kind {WINDOW_MLP!r}, got {model.window}")
    if model.kind != WINDOW_MLP and model.window != 0:
        raise ParamsError(f"{path}.window: only kind {WINDOW_MLP!r} has a window; remove it for cell {model.cell!r}")


def _check_schedule(model: ModelParams, path: str) -> None:
    """The entry's schedule within `MAX_TRAINING_STEPS` steps in all."""
    if model.epochs * model.steps_per_epoch > MAX_TRAINING_STEPS:
        raise ParamsError(f"{path}: epochs x steps_per_epoch is {model.epochs:,} x {model.steps_per_epoch:,} = "
                          f"{model.epochs * model.steps_per_epoch:,} steps; expected at most {MAX_TRAINING_STEPS:,}")


def _check_state(model: ModelParams, state: str | None, key: str) -> None:
    """'carried' needs a recurrent model: the fixed-window one has no state to carry (`key`: the
    setting that asked for it)."""
    if state == "carried" and model.kind != RECURRENT:
        raise ParamsError(f"{key}: 'carried' needs a recurrent model; kind {model.kind!r} has no state to carry")


def training_settings(params: Params, name: str) -> TrainParams:
    """The `train:` settings of model `name`: the shared ones with its entry's own over them.
    ParamsError when the shared `train.state: carried` falls on the fixed-window model."""
    own = {key: value for key, value in as_dict(params.models[name].train).items() if value is not None}
    settings = dataclasses.replace(params.train, **own)
    _check_state(params.models[name], settings.state, "train.state")  # an entry's own was checked at load
    return settings


def model_entry(raw: Any, path: str = "model") -> ModelParams:
    """One entry of `models:` (as params.yaml or a run's own copy of it holds it, in either spelling
    of the fixed-window MLP), validated into `ModelParams`, or a ParamsError naming the key."""
    model = build(ModelParams, _first_spelling(raw), path)
    _check_kind(model, path)
    _check_schedule(model, path)
    _check_state(model, model.train.state, f"{path}.train.state")
    return model


def parse_params(raw: Any) -> Params:
    """Validate an already parsed params mapping into `Params`."""
    params = build(Params, raw, "")
    select_model(params, params.model)
    training_settings(params, params.model)  # the shared train.state against the selected entry, refused here
    return params


def load_params(path: str | Path = "params.yaml") -> Params:
    """Read and validate params.yaml at `path`, every section."""
    return parse_params(read_yaml(path))


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
