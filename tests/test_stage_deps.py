"""The stages that run a model list the model's code among their DVC deps, so that changing how a
model computes reruns every stage whose numbers could change."""

from __future__ import annotations

import pytest
import yaml

from tests.conftest import REPO_ROOT

# What builds a model from a checkpoint and runs it: the layers, their scans and compiled loops.
MODEL_CODE = {
    f"src/rnnlm/{name}.py"
    for name in ("checkpoint", "tokenizers", "model", "window_mlp", "cells", "scans", "scan_loops", "native",
                 "triton_loops", "device")
}
STAGES = yaml.safe_load((REPO_ROOT / "dvc.yaml").read_text(encoding="utf-8"))["stages"]


@pytest.mark.parametrize("name", ["train", "generate", "evaluate"])
def test_stages_that_run_a_model_depend_on_its_code(name):
    deps = set(STAGES[name]["deps"])
    assert MODEL_CODE <= deps, f"{name}: missing {sorted(MODEL_CODE - deps)}"
    assert "src/rnnlm/csrc/scan_loops.cpp" in deps or "src/rnnlm/csrc" in deps, f"{name}: missing the C++ loops"


def test_generation_depends_on_the_sampling_code():
    deps = set(STAGES["generate"]["deps"])
    assert {"src/rnnlm/sampling.py", "src/rnnlm/stepping.py", "src/rnnlm/csrc"} <= deps
