"""The generation report: every prompt, strategy and mode; the same bytes for the same inputs."""

from __future__ import annotations

from rnnlm.checkpoint import load_checkpoint
from rnnlm.params import GenerateParams
from rnnlm.report import GenerationRun, Sample, run_generations, to_markdown, write_generation_report

SETTINGS = GenerateParams(prompts=("ROMEO: ", "KING: ", "FIRST CITIZEN: "), max_new_tokens=30, temperature=0.8,
                          top_k=5, top_k_temperature=1.0, top_p=0.9, top_p_temperature=1.0)


def test_every_prompt_strategy_and_mode(char_checkpoint):
    run = run_generations(load_checkpoint(char_checkpoint), char_checkpoint, SETTINGS, seed=1)
    assert len(run.samples) == 3 * 4 * 2
    assert {(s.strategy, s.mode) for s in run.samples if s.prompt == "KING: "} == {
        (strategy, mode) for strategy in ("greedy", "temperature", "top_k", "top_p") for mode in ("stateless", "stateful")}
    assert all(s.text.startswith(s.prompt) and s.new_tokens == 30 for s in run.samples)
    assert run.checkpoint["tokens"] == "char" and run.settings["seed"] == 1


def test_same_inputs_same_bytes(char_checkpoint, tmp_path):
    for name in ("a", "b"):
        run = run_generations(load_checkpoint(char_checkpoint), char_checkpoint, SETTINGS, seed=1)
        write_generation_report(run, tmp_path / f"{name}.md", tmp_path / f"{name}.json")
    assert (tmp_path / "a.md").read_bytes() == (tmp_path / "b.md").read_bytes()
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    assert GenerationRun.from_json((tmp_path / "a.json").read_text()).to_json() == (tmp_path / "a.json").read_text()


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
