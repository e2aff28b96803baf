"""How params.yaml is read and checked, and the two sections the data stages read.

In:  a path to params.yaml (or an already parsed mapping).
Out: frozen dataclasses. Every unknown key, missing key, wrong type or impossible value raises
`ParamsError` with one line naming the key path and what was expected, for example
`data.train_fraction: expected a number strictly between 0 and 1, got 1.5`; stages turn it into exit
status 2. `load_section` checks one section alone; `rnnlm.params` defines the rest of the file (the
models, training, generation, evaluation) and checks it whole. The data sections live here, apart
from the models' schema, so that the download, prepare and tokenizer stages run (and depend on) no
model code: adding a cell leaves them as they are.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, get_type_hints

import yaml

from rnnlm.errors import ParamsError

T = TypeVar("T")

# ---------------------------------------------------------------------------------------------
# Field specifications: the Python type a value must have, a predicate, and the words for it.


def setting(kind: type, expected: str | Callable[[], str], ok: Callable[[Any], bool] = lambda value: True,
          omitted_at_default: bool = False, **default: Any) -> Any:
    """A field; with `default=...` it may be left out of params.yaml. `omitted_at_default`: a setting
    added after runs were made, left out of `as_dict` (checkpoints, run fingerprints) while it holds
    its default, so those runs' bytes and resume files stay what they were."""
    return field(metadata={"kind": kind, "expected": expected, "ok": ok, "omitted_at_default": omitted_at_default},
                 **default)


def positive_int() -> Any:
    return setting(int, "a positive integer", lambda v: v > 0)


SEED_MAX = 2**64 - 1
"""The largest seed PyTorch's generators take: they hold an unsigned 64-bit integer."""
SEED_EXPECTED = "an integer from 0 to 2**64 - 1"


def seed_in_range(value: int) -> bool:
    """Whether `value` is a seed every generator the pipeline seeds with it accepts."""
    return 0 <= value <= SEED_MAX


def seed() -> Any:
    return setting(int, SEED_EXPECTED, seed_in_range)


def positive_float() -> Any:
    return setting(float, "a finite positive number", lambda v: 0 < v < math.inf)


def non_negative_float() -> Any:
    return setting(float, "a finite non-negative number", lambda v: 0 <= v < math.inf)


def open_fraction() -> Any:
    return setting(float, "a number strictly between 0 and 1", lambda v: 0 < v < 1)


def probability_below_one() -> Any:
    return setting(float, "a number in [0, 1)", lambda v: 0 <= v < 1)


def choice(*options: str) -> Any:
    words = ", ".join(repr(o) for o in options)
    return setting(str, f"one of {words}", lambda v: v in options)


def text(expected: str = "a non-empty string", ok: Callable[[Any], bool] = bool) -> Any:
    return setting(str, expected, ok)


def flag() -> Any:
    return setting(bool, "true or false")


def text_list() -> Any:
    """A non-empty list of non-empty strings, stored as a tuple."""
    return setting(
        list, "a non-empty list of non-empty strings", lambda v: bool(v) and all(isinstance(s, str) and s for s in v)
    )


# ---------------------------------------------------------------------------------------------
# The sections of the data stages.


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

    vocab_size: int = setting(int, "an integer of at least 16", lambda v: v >= 16)
    model_type: str = choice("unigram", "bpe")
    character_coverage: float = setting(float, "a number in (0, 1]", lambda v: 0 < v <= 1)


# ---------------------------------------------------------------------------------------------
# Loading.


class DuplicateKey(yaml.YAMLError):
    """A mapping names one key twice: PyYAML keeps the last silently, DVC (ruamel) refuses the file."""


_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""PyYAML's safe loader on libyaml's parser where PyYAML was built with it (its wheels are): the same
documents, read about ten times faster (the study reads a params.yaml per run)."""


class _Yaml12Loader(_SafeLoader):
    """PyYAML's safe loader, reading `3e-3` as a float and `yes` as a string as YAML 1.2 (and so DVC)
    does, and refusing a mapping that names a key twice, as DVC's reader does; merge keys
    (`<<: *alpha`) are read, as DVC reads them."""

    def construct_mapping(self, node, deep=False):
        seen: dict[object, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *anchor`: merged below by PyYAML (its keys may be overridden here, as DVC allows)
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise DuplicateKey(f"key {key!r} appears twice (lines {seen[key]} and {key_node.start_mark.line + 1}); "
                                   "expected each key once, as DVC requires")
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep)


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

_BOOL = "tag:yaml.org,2002:bool"
_Yaml12Loader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag != _BOOL]
    for first, resolvers in _Yaml12Loader.yaml_implicit_resolvers.items()
}
_Yaml12Loader.add_implicit_resolver(_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
"""Booleans as YAML 1.2 (and so DVC) reads them: only true and false. PyYAML's YAML 1.1 would also read
yes, no, on and off as booleans, where DVC reads the strings 'yes' and 'off': `layer_norm: yes` would
train with LayerNorm while `dvc params diff` shows a string. As strings, a boolean setting refuses them."""


def describe_value(value: Any) -> str:
    return "nothing" if value is None else repr(value)


def _check_value(path: str, value: Any, meta: Mapping[str, Any]) -> Any:
    kind, expected, ok = meta["kind"], meta["expected"], meta["ok"]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    type_ok = isinstance(value, kind) and (kind is bool or not isinstance(value, bool))
    if not type_ok or not ok(value):
        expected = expected() if callable(expected) else expected  # words made when needed (the cell names)
        raise ParamsError(f"{path}: expected {expected}, got {describe_value(value)}")
    return tuple(value) if kind is list else value


def build(cls: type, raw: Any, path: str) -> Any:
    """Build dataclass `cls` from mapping `raw`, checking keys and values; `path` prefixes errors."""
    where = f"{path}: " if path else ""
    if not isinstance(raw, Mapping):
        raise ParamsError(f"{where or 'params: '}expected a mapping of keys, got {describe_value(raw)}")
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
            values[f.name] = build(hint, raw[f.name], sub)
        elif "build" in f.metadata:  # a section with its own builder (params' `models:`)
            values[f.name] = f.metadata["build"](raw[f.name], sub)
        else:
            values[f.name] = _check_value(sub, raw[f.name], f.metadata)
    return cls(**values)


def parse_yaml(text: str) -> Any:
    """YAML text parsed as params.yaml is (YAML 1.2 numbers, a key named twice refused): a
    `yaml.YAMLError` (a `DuplicateKey` for the latter) when it is not."""
    return yaml.load(text, Loader=_Yaml12Loader)


def read_yaml(path: str | Path) -> Any:
    """params.yaml at `path`, parsed as YAML 1.2 (as DVC reads it), unchecked."""
    path = Path(path)
    try:
        return parse_yaml(path.read_text(encoding="utf-8"))
    except FileNotFoundError as error:
        raise ParamsError(f"{path}: no such file; expected params.yaml at the repository root") from error
    except (OSError, UnicodeDecodeError) as error:
        why = error.strerror if isinstance(error, OSError) else "not UTF-8 text"
        raise ParamsError(f"{path}: cannot be read ({why}); expected params.yaml, a YAML file") from error
    except DuplicateKey as error:
        raise ParamsError(f"{path}: {error}") from error
    except yaml.YAMLError as error:
        first = str(error).splitlines()[0]
        raise ParamsError(f"{path}: not valid YAML ({first})") from error


def load_section(key: str, cls: type[T], path: str | Path = "params.yaml") -> T:
    """The one section `key` of params.yaml at `path`, checked into `cls`; the rest of the file is
    neither checked nor needed (what the data stages read: their outputs depend on nothing else)."""
    raw = read_yaml(path)
    if not isinstance(raw, Mapping):
        raise ParamsError(f"params: expected a mapping of keys, got {describe_value(raw)}")
    if key not in raw:
        raise ParamsError(f"{key}: missing; expected a mapping")
    return build(cls, raw[key], key)
