"""Generation runs: every prompt, strategy and mode; the same bytes for the same inputs."""

from __future__ import annotations

from rnnlm.models.checkpoint import load_checkpoint
from rnnlm.inference.generation_record import read_generations
from rnnlm.inference.generation import run_generations
from rnnlm.reporting.generation_markdown import to_markdown
from tests.conftest import METRICS, SETTINGS


def test_every_prompt_strategy_and_mode(char_checkpoint):
    run = run_generations(load_checkpoint(char_checkpoint), char_checkpoint, SETTINGS, seed=1)
    assert len(run.samples) == 3 * 4 * 2
    assert {(s.strategy, s.mode) for s in run.samples if s.prompt == "KING: "} == {
        (strategy, mode) for strategy in ("greedy", "temperature", "top_k", "top_p") for mode in ("stateless", "stateful")}
    assert all(s.text.startswith(s.prompt) and s.new_tokens == 30 for s in run.samples)
    assert run.checkpoint["tokens"] == "char" and run.settings["seed"] == 1


def test_same_inputs_same_bytes(char_checkpoint, tmp_path):
    runs = [run_generations(load_checkpoint(char_checkpoint), char_checkpoint, SETTINGS, seed=1) for _ in range(2)]
    assert runs[0].to_json() == runs[1].to_json()
    assert to_markdown(runs[0], METRICS) == to_markdown(runs[1], METRICS)
    (tmp_path / "g.json").write_text(runs[0].to_json())
    assert read_generations(tmp_path / "g.json").to_json() == runs[0].to_json()
