"""DVC stage `report`: the generation report, measures first, then the two modes side by side.

Usage: python stages/report.py GENERATIONS_JSON METRICS_JSON REPORT_MD
"""

import json

from rnnlm.atomic import write_text_atomic
from rnnlm.errors import RnnlmError
from rnnlm.command_line import command_args, run_main
from rnnlm.inference.generation_record import read_generations
from rnnlm.reporting.generation_markdown import to_markdown


def main() -> None:
    generations_path, metrics_path, markdown_path = command_args(__doc__)
    run = read_generations(generations_path)
    try:
        with open(metrics_path, encoding="utf-8") as file:
            metrics = json.load(file)
    except (OSError, ValueError) as error:
        raise RnnlmError(f"{metrics_path}: cannot read the metrics ({error}); run the evaluate stage") from error
    write_text_atomic(markdown_path, to_markdown(run, metrics))
    print(f"wrote {markdown_path}")


if __name__ == "__main__":
    run_main(main)
