"""The contract a cell's parameters keep: exactly the ones its `parameter_shapes` declares, in that
order and of those shapes, with a `weight_hh` of its recurrence's shape. A layer checks its cell
when it is built (`rnnlm.models.cells.base.RecurrentLayer`), so a new cell that breaks it stops
with one line naming the parameter, before a parameter count, a checkpoint or a loop reads it.
"""

from __future__ import annotations

from torch import nn

from rnnlm.errors import RnnlmError


class CellContractError(RnnlmError):
    """A cell whose built parameters are not the ones it declares."""


def check_contract(cell: nn.Module) -> None:
    """CellContractError, naming the cell and the parameter, unless `cell` (a `base.Cell`) holds exactly the
    parameters its `parameter_shapes` declares, in that order and of those shapes (what a model's
    parameter count, its checkpoints and the loops read), with a `weight_hh` of its `recurrence`'s
    shape: a matrix (G*H, H) or a vector (G*H)."""
    name = type(cell).__name__
    declared = cell.parameter_shapes(cell.input_size, cell.hidden_size)
    built = {key: tuple(p.shape) for key, p in cell.named_parameters()}
    for key in [*declared, *(k for k in built if k not in declared)]:
        if built.get(key) != declared.get(key):
            what = "not built" if key not in built else f"built as {built[key]}"
            said = "not declared" if key not in declared else f"declared as {declared[key]}"
            raise CellContractError(f"{name}.{key}: {what}, {said} by parameter_shapes; expected a cell whose "
                                    "__init__ leaves exactly the parameters it declares")
    if list(built) != list(declared):
        raise CellContractError(f"{name}: parameters built in the order {', '.join(built)}, declared in the order "
                                f"{', '.join(declared)}; expected the declared order")
    rows = cell.gates * cell.hidden_size
    expected = (rows, cell.hidden_size) if cell.recurrence == "matrix" else (rows,)
    if built.get("weight_hh") != expected:
        raise CellContractError(f"{name}.weight_hh: of shape {built.get('weight_hh')}, but recurrence "
                                f"{cell.recurrence!r} with {cell.gates} gates of {cell.hidden_size} units reads "
                                f"{expected}; expected them to agree")
