"""DVC stage `generate`: sample the trained model stateless and stateful, side by side.

Usage: python stages/generate.py CHECKPOINT REPORT_MD REPORT_JSON
For every prompt of params `generate.prompts`, every strategy (greedy, temperature, top-k, top-p)
and both modes, writes REPORT_MD (for people) and REPORT_JSON (the same data, for programs).
"""

import sys

from rnnlm.checkpoint import load_checkpoint
from rnnlm.errors import run_main
from rnnlm.params import load_params
from rnnlm.report import run_generations, write_generation_report


def main() -> None:
    checkpoint_path, markdown_path, json_path = sys.argv[1:]
    params = load_params()
    checkpoint = load_checkpoint(checkpoint_path, model_name=params.model)
    run = run_generations(checkpoint, checkpoint_path, params.generate, params.seed)
    write_generation_report(run, markdown_path, json_path)
    print(f"wrote {markdown_path} and {json_path}: {len(run.samples)} samples of {run.model}")


if __name__ == "__main__":
    run_main(main)
