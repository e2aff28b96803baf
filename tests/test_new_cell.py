"""A cell is its own file plus one registry line. Every registered cell trains through the library's
training loop, samples in both modes and goes through every measure of the evaluate stage: among
them the minimal gated unit (`models/cells/mgu.py`: its maths alone, run by autograd), the IndRNN
(`models/cells/indrnn.py`: a vector recurrence and a ReLU, its maths alone) and the softsign RNN of
tests/softsign_cell.py (hand-written Python loops, no compiled ones; registered by tests/conftest.py).
(The equivalence tests that run on every registered cell run on them too.)"""

from __future__ import annotations

import math

import pytest
import torch

from rnnlm.data.corpus import character_vocabulary, split_corpus
from rnnlm.data.tokenizers import CharTokenizer
from rnnlm.evaluation.evaluate import evaluate
from rnnlm.inference.decoding import Decoding
from rnnlm.inference.generation import generate, make_generator
from rnnlm.models.checkpoint import load_checkpoint, save_checkpoint
from rnnlm.params import parse_params
from rnnlm.inference.generation import run_generations
from tests.conftest import synthetic_play, train_model
from rnnlm.models.cells import CELLS
from rnnlm.models.cells.contract import CellContractError
from tests.softsign_cell import SPEC as SOFTSIGN


@pytest.mark.parametrize("name", CELLS)
def test_a_new_cell_trains_samples_and_is_evaluated(name, raw_params, tmp_path):
    """Every registered cell, so that one added tomorrow is held to this with no test to edit."""
    text = synthetic_play(12_000)
    split, tokenizer = split_corpus(text, 0.9), CharTokenizer(character_vocabulary(text))
    raw_params["models"]["astra_alpha"].update({"cell": name, "embd": 8, "hidden": 16, "layers": 2, "epochs": 2,
                                               "steps_per_epoch": 15, "lr": 1e-2})
    raw_params["train"].update({"batch_size": 8, "seq_len": 24, "device": "cpu"})
    raw_params["generate"].update({"max_new_tokens": 12, "prompts": ["ROMEO: "]})
    raw_params["evaluate"].update({"context_targets": 50, "context_lengths": [1, 4, 16], "reset_every": [1, 4, 16]})
    params = parse_params(raw_params)  # `cell:` accepts every registered cell
    result = train_model(params, "astra_alpha", tokenizer, split.train, split.val, resume_dir=tmp_path)
    losses = [row["val_loss"] for row in result.history.epochs]
    assert result.checkpoint.model_config.cell == name and losses[-1] < math.log(tokenizer.vocab_size)

    model = result.checkpoint.build_model()
    prompt = tokenizer.encode("ROMEO: ")
    for mode in ("stateless", "stateful"):
        ids = generate(model, prompt, mode=mode, decoding=Decoding("top_k", top_k=5), max_new_tokens=10,
                       generator=make_generator(1))
        assert ids.shape == (1, 10)
    checkpoint = tmp_path / "model.pt"
    save_checkpoint(checkpoint, result.checkpoint)
    generations = run_generations(load_checkpoint(checkpoint), checkpoint, params.generate, params.seed)
    metrics, curve, context, _ = evaluate(load_checkpoint(checkpoint), split.train, split.val, generations,
                                       params.evaluate, params.seed)
    assert metrics["stateful_bpc"] < metrics["stateless_bpc"]  # it learned to use its state
    assert {"bigram_bpc", "context_horizon", "reset_curve_bpc", "text", "first_epoch"} <= metrics.keys()
    assert [point.k for point in curve][:3] == [1, 4, 16]


@pytest.mark.parametrize("name", ["mgu", "indrnn"])
def test_the_worked_examples_are_their_maths_in_a_few_lines(name):
    """The worked examples of docs/layout.md (a matrix recurrence, a vector one): no loops, no
    Function, no compiled or Triton file, each cell's file (its docstring aside) and its registry
    line under 40 lines, shown in the page."""
    import importlib
    from pathlib import Path

    module = importlib.import_module(f"rnnlm.models.cells.{name}")
    spec = CELLS[name]
    assert spec.python_loops is None and spec.triton_loops is None and spec.state_entries == 1
    source = Path(module.__file__).read_text()
    code = source[source.index('"""', 3) + 3 :].strip().splitlines()
    assert len(code) + 1 < 40, len(code)
    assert not Path(module.__file__).with_suffix(".cpp").exists()
    assert f"models/cells/{name}.py" in (Path(__file__).parents[1] / "docs/layout.md").read_text()


class _Replaced(SOFTSIGN.layer.cell_class):
    """Replaces its declared weight_hh after building it: a parameter count of another shape."""

    def __init__(self, input_size, hidden_size):
        super().__init__(input_size, hidden_size)
        self.weight_hh = torch.nn.Parameter(torch.zeros(hidden_size, 2 * hidden_size))


class _Extra(SOFTSIGN.layer.cell_class):
    """Adds a parameter it never declares."""

    def __init__(self, input_size, hidden_size):
        super().__init__(input_size, hidden_size)
        self.gain = torch.nn.Parameter(torch.ones(hidden_size))


class _Vector(SOFTSIGN.layer.cell_class):
    """Says its recurrence is a vector but declares (and builds) a matrix."""

    recurrence = "vector"

    @classmethod
    def parameter_shapes(cls, input_size, hidden_size):
        return {"weight_ih": (hidden_size, input_size), "bias_ih": (hidden_size,),
                "weight_hh": (hidden_size, hidden_size)}


@pytest.mark.parametrize("cell, message", [
    (_Replaced, r"^_Replaced.weight_hh: built as \(16, 32\), declared as \(16, 16\) by parameter_shapes; expected a "
                r"cell whose __init__ leaves exactly the parameters it declares$"),
    (_Extra, r"^_Extra.gain: built as \(16,\), not declared by parameter_shapes"),
    (_Vector, r"^_Vector.weight_hh: of shape \(16, 16\), but recurrence 'vector' with 1 gates of 16 units reads "
              r"\(16,\); expected them to agree$"),
], ids=["a parameter replaced", "a parameter undeclared", "a recurrence that is not its weight's"])
def test_a_cell_that_breaks_its_declared_shapes_is_refused_when_built(cell, message):
    layer = type("Layer", (SOFTSIGN.layer,), {"cell_class": cell})
    with pytest.raises(CellContractError, match=message):
        layer(8, 16)
