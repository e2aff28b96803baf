"""The generation report in Markdown: the measures first, the two modes side by side."""

from __future__ import annotations

from rnnlm.inference.generation_record import GenerationRun, Sample
from rnnlm.reporting.generation_markdown import to_markdown
from tests.conftest import METRICS

def test_markdown_sets_the_modes_side_by_side_and_escapes_html():
    run = GenerationRun(
        model="m", checkpoint={"path": "models/model.pt", "sha256": "0" * 64, "steps": 10, "parameters": 5, "tokens": "char"},
        settings={"max_new_tokens": 3, "seed": 0},
        samples=[Sample("A: ", "greedy", "greedy", "stateless", "A: <b>&", 4),
                 Sample("A: ", "greedy", "greedy", "stateful", "A: x\ny", 3)],
    )
    text = to_markdown(run)
    assert "<tr><th>stateless</th><th>stateful</th></tr>" in text
    assert "<td><pre><b>A: </b>&lt;b&gt;&amp;</pre></td><td><pre><b>A: </b>x\ny</pre></td>" in text
    assert "## Prompt `A: `" in text and "### greedy" in text




def test_measures_come_first_as_tables():
    run = GenerationRun(model="m", checkpoint={"path": "p", "sha256": "0" * 64, "steps": 1, "parameters": 1, "tokens": "char"},
                        settings={"max_new_tokens": 1, "seed": 0},
                        samples=[Sample("A", "greedy", "greedy", mode, "Ab", 1) for mode in ("stateless", "stateful")])
    text = to_markdown(run, METRICS)
    assert text.index("## What statefulness is worth") < text.index("## Prompt `A`")
    assert "| stateful: the state is never reset | 2.390 |" in text
    assert "| stateless: the state is reset before every token | 3.760 |" in text
    assert "| k | 1 | 128 | never |" in text and "| bits per character | 3.760 | 2.410 | 2.390 |" in text
    assert ("Context horizon, the smallest c within 1% of the stateful pass: 16 tokens (from 8 tokens to 32 "
            "tokens within two standard errors)") in text
    assert "| c (tokens of context) | 1 | 16 | 64 |" in text and "| over the stateful pass | +54.2% | +0.4% | +0.0% |" in text
    assert "horizon" not in text.split("State reset every k tokens")[1].split("| k |")[0]
    assert "| lines in the `NAME:` speaker form | – | – | – |" in text
    assert "after epoch 1" not in text  # a checkpoint without epoch 1's weights
    with_first = to_markdown(run, {**METRICS, "first_epoch": {"stateful_bpc": 2.9, "stateless_bpc": 3.8}})
    assert "| after epoch 1 only, stateful | 2.900 |" in with_first
    assert "| after epoch 1 only, stateless | 3.800 |" in with_first
