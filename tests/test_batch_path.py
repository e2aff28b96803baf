"""The Python modules one training batch crosses are the ones docs/layout.md lists, at most eight.

One steady block of a tiny run (its second, after the compiled code has loaded) is traced with
`sys.setprofile`. A module is on the batch's path when one of its functions runs inside the
optimizer step (`EagerStep.__call__`, down to the compiled loops), or it holds the stage or the
loop; it is beside the path when the loop's body calls it outside the step (the block's windows,
the core share, the record).
"""

from __future__ import annotations

import ast
import inspect
import re
import sys
import textwrap
from pathlib import Path

import pytest

import rnnlm
from rnnlm.data.corpus import character_vocabulary, split_corpus
from rnnlm.data.tokenizers import CharTokenizer
from rnnlm.params import parse_params
from rnnlm.training import train as loop_module
from rnnlm.training.record import RunRecord
from rnnlm.training.settings import run_settings
from rnnlm.training.step import EagerStep
from tests.conftest import REPO_ROOT, synthetic_play

PACKAGE = Path(rnnlm.__file__).resolve().parent
TEXT = synthetic_play(12_000)
SPLIT = split_corpus(TEXT, 0.9)
TOKENIZER = CharTokenizer(character_vocabulary(TEXT))
STAGE, LOOP = "stages/train.py", "training/train.py"


def documented(heading: str) -> list[str]:
    """The modules of the table that follows `heading` in docs/layout.md, in order."""
    text = (REPO_ROOT / "docs" / "layout.md").read_text(encoding="utf-8")
    table = text[text.index(heading):].split("\n\n")[1]
    return re.findall(r"^\| `([^`]+\.py)` \|", table, flags=re.MULTILINE)


def block_lines() -> range:
    """The source lines of the loop over an epoch's blocks (`_train_epoch`)."""
    function = loop_module._train_epoch
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    loop = next(node for node in ast.walk(tree) if isinstance(node, ast.For) and getattr(node.target, "id", "") == "first")
    first = function.__code__.co_firstlineno
    return range(first + loop.lineno - 1, first + loop.end_lineno)


def trace_second_block(raw_params: dict, model: str) -> tuple[set[str], set[str]]:
    """(on the path, beside it): the package's modules a steady block of `model` runs, relative to
    src/rnnlm, the stage and the loop included in the path."""
    raw_params["models"][model].update({"embd": 8, "hidden": 12, "layers": 2, "epochs": 1, "steps_per_epoch": 4})
    raw_params["train"].update({"batch_size": 4, "seq_len": 16, "device": "cpu", "check_every": 2})
    run = run_settings(parse_params(raw_params), model, TOKENIZER.vocab_size)
    loop_code, step_code, lines = loop_module._train_epoch.__code__, EagerStep.__call__.__code__, block_lines()
    path, beside = {STAGE, LOOP}, set()

    def seen(frame, event, _arg) -> None:
        if event != "call" or not frame.f_code.co_filename.startswith(str(PACKAGE)):
            return
        inside_step, caller = False, frame
        while caller is not None and caller.f_code is not loop_code:
            inside_step |= caller.f_code is step_code
            caller = caller.f_back
        if caller is None or caller.f_lineno not in lines or caller.f_locals.get("first", 0) < 2:
            return  # not the loop's body, or its first block (the compiled code loads there)
        module = Path(frame.f_code.co_filename).resolve().relative_to(PACKAGE).as_posix()
        (path if inside_step else beside).add(module)

    sys.setprofile(seen)
    try:
        loop_module.train(run, TOKENIZER, SPLIT.train, SPLIT.val, RunRecord(bar=False))
    finally:
        sys.setprofile(None)
    return path, beside - path


@pytest.mark.parametrize("model, cell", [("astra_alpha", "gru"), ("leviathan", "lstm")])
def test_a_batch_crosses_the_eight_modules_docs_layout_lists(raw_params, model, cell):
    path, beside = trace_second_block(raw_params, model)
    listed = [name.replace("cells/gru.py", f"cells/{cell}.py") for name in documented("**The path of one training batch**")]
    assert sorted(path) == sorted(listed)
    assert len(path) <= 8
    assert sorted(beside) == sorted(documented("**Beside the path**"))
