"""The README's front door: its "Two commands" section shows two commands, each making a virtual
environment and installing the pins, the first running the default pipeline and the second the
command CI runs (.ci/run)."""

from __future__ import annotations

import re

from tests.conftest import REPO_ROOT


def test_the_readme_shows_two_commands_and_the_second_is_the_one_ci_runs():
    readme = (REPO_ROOT / "README.md").read_text()
    section = readme.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    (block,) = blocks
    commands = block.strip().splitlines()
    setup = "python3 -m venv .venv && . .venv/bin/activate && pip install -r requirements.txt && "
    assert len(commands) == 2 and all(command.startswith(setup) for command in commands)
    assert commands[0].removeprefix(setup) == "dvc repro"
    ci = (REPO_ROOT / ".ci/run").read_text()
    assert commands[1].removeprefix(setup) == "python -m pytest -q" and "\npython -m pytest -q\n" in ci
    assert "python -m pip install --quiet --disable-pip-version-check -r requirements.txt" in ci
    assert re.search(r"Python 3\.\d+ or newer", section)
