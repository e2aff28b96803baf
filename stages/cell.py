"""DVC stage `cell`: what the selected model's cell is made of, as a file the model stages depend on,
after refusing what those stages would refuse.

Usage: python stages/cell.py OUT_JSON PREPARED_DIR TOKENIZER_DIR
First checks the whole of params.yaml and what the machine can answer of the selected run
(`rnnlm.preflight`: the device, the memory of a training step, the validation text's length): this
stage runs before train, generate and evaluate whenever a param of theirs changes, so a refused value
stops here, before DVC deletes their outputs. Then writes OUT_JSON: the cell's name, its module and
the sha256 of each library file its models run (`Registry.fingerprint`: its own files and the shared
ones; nothing for the fixed-window MLP, which has no cell). train, generate and evaluate depend on
OUT_JSON instead of the cells' folder, so a new or edited cell reruns this stage (a second, no PyTorch
on a machine without a GPU) and only the models of that cell: for any other model OUT_JSON comes out
byte for byte as before, and DVC skips the stages after it.
"""

import json

from rnnlm.atomic import write_text_atomic
from rnnlm.command_line import command_args, run_main
from rnnlm.models.cells import CELLS
from rnnlm.params import load_params
from rnnlm.preflight import check_run


def main() -> None:
    out_json, prepared, tokenizer_dir = command_args(__doc__)
    params = load_params()  # the whole file: this is the first stage that reads a model's entry
    check_run(params, prepared, tokenizer_dir)
    entry = params.selected
    # a model of another kind has no cell: its record names the kind (as `cell`, the bytes it always had)
    record = CELLS.fingerprint(entry.cell) if entry.cell else {"cell": entry.config_cell, "module": None, "files": {}}
    write_text_atomic(out_json, json.dumps(record, indent=2) + "\n")
    what = f"cell {entry.cell}" if entry.cell else f"kind {entry.kind} (no cell)"
    print(f"wrote {out_json}: {params.model}'s {what}, {len(record['files'])} files")


if __name__ == "__main__":
    run_main(main)
