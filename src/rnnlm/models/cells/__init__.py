"""The registry of recurrent cells: one line per cell.

Adding a cell means adding its module beside these (`NAME.py` with its cell's `recur`, its layer and
its `SPEC`; `mgu.py` is the smallest) and one line below. Loops of its own are optional (Python loops
with an autograd Function in `NAME.py`, compiled ones in `NAME.cpp`, which this package adds to the
compiled module's sources below and which registers them under the same name, Triton ones in
`NAME_triton.py`, named in its `SPEC`):
without them autograd runs its `recur`. params.yaml's `cell:` choices, the model's layers, the
sampling advanceper and the tests all read `CELLS`.

The registry (`registry.Registry`) names each cell's module rather than importing it: the cells' names are known without
PyTorch, so that the stages that only read params.yaml's other sections (download, prepare,
tokenizer) check every `cell:` without importing PyTorch (seconds per stage); a cell's module is
imported the first time its `CellSpec` is asked for.

The model stages do not depend on this file or on the other cells: the `cell` stage writes the
selected cell's registry entry and the fingerprints of the files its models run
(`Registry.files`) to `models/cell.json`, and train, generate and evaluate depend on that, so adding
or editing another cell leaves them as they are.
"""

from rnnlm.compute import sources
from rnnlm.models.cells.registry import FOLDER, Registry

CELLS = Registry({
    "gru": "rnnlm.models.cells.gru",
    "lstm": "rnnlm.models.cells.lstm",
    "rnn": "rnnlm.models.cells.rnn",
    "mgu": "rnnlm.models.cells.mgu",
    "indrnn": "rnnlm.models.cells.indrnn",
})

sources.add(sorted(FOLDER.glob("*.cpp")))  # each cell's compiled loops, built into compute's module
