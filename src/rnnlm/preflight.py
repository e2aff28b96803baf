"""What the model stages would refuse, checked before DVC deletes anything of theirs.

DVC removes a stage's outputs just before it runs the stage, so a value refused by `train` (say
`dvc exp run -S train.batch_size=100000000`) costs the checkpoint, the training reports and the
generations first. The `cell` stage runs before them whenever a param they read changes, and it
calls `check_run`: what params.yaml and the machine can answer is refused there, in one line, while
every model output is still in place. `train` keeps its own checks (a library caller has no `cell`
stage); these are the same questions asked earlier.

In:  the checked params (`rnnlm.params.Params`: its bounds on steps and tokens are the schema's), the
     prepared data folder and the tokenizer folder.
Out: `check_run` -> nothing, or a `ParamsError` naming the setting and what was expected:
     - `train.device: cuda` where PyTorch sees no GPU;
     - a training step that needs more memory than the device has available, by `step_bytes`, a
       lower bound: a run refused here could never have fitted;
     - `train.seq_len` that the validation text (at the run's scale) cannot fill once with its next
       token: the per-epoch validation needs one window.

PyTorch is imported only where the device may be a GPU (`train.device: cuda`, or `auto` on a machine
with NVIDIA's driver loaded): on a CPU-only machine the stage stays as quick as it was.
"""

from __future__ import annotations

from pathlib import Path

from rnnlm.compute.cpu import available_memory
from rnnlm.data.corpus import VAL_FILE, read_corpus
from rnnlm.data.tokenizers import load_tokenizer
from rnnlm.errors import ParamsError
from rnnlm.models.config import RECURRENT
from rnnlm.params import ModelParams, Params, training_settings
from rnnlm.scale import validation_text

NVIDIA_DRIVER = Path("/proc/driver/nvidia/version")
"""Present where NVIDIA's kernel driver is loaded: only then can `auto` mean a GPU."""

FLOAT32 = 4
PER_PARAMETER = 4 * FLOAT32
"""Bytes a trained parameter holds at least: its weight, its gradient and AdamW's two moments."""


def check_run(params: Params, prepared: str | Path, tokenizer_dir: str | Path) -> None:
    """Refuse (`ParamsError`, one line) what the train stage would refuse for the selected model, by
    params and the machine alone (module docstring)."""
    entry, train = params.selected, training_settings(params, params.model)
    tokenizer = load_tokenizer(entry.tokens, prepared, tokenizer_dir)
    device, available = _device_memory(train.device)
    need = step_bytes(entry, tokenizer.vocab_size, train.batch_size, train.seq_len, available)
    if need is not None:
        raise ParamsError(f"models.{params.model} (embd {entry.embd:,}, hidden {entry.hidden:,}, {entry.layers} "
                          f"layer{'s' if entry.layers > 1 else ''}) at train.batch_size {train.batch_size:,} and "
                          f"train.seq_len {train.seq_len:,}: a training step needs at least {need / 2**30:,.1f} GiB, the "
                          f"{device} has {available / 2**30:,.1f} GiB available; expected a smaller model, batch or window")
    val_text = validation_text(read_corpus(Path(prepared) / VAL_FILE), train.steps_scale)
    val_tokens = len(tokenizer.encode(val_text))
    if train.seq_len >= val_tokens:
        raise ParamsError(f"train.seq_len: {train.seq_len:,} is longer than the validation text can fill once "
                          f"({val_tokens:,} tokens of {params.model}'s tokenizer at train.steps_scale "
                          f"{train.steps_scale:g}); expected at most {val_tokens - 1:,}")


MOST_GATES = 4
"""The most gate-sized weight matrices a cell here has per layer (the LSTM's four)."""


def step_bytes(entry: ModelParams, vocab: int, batch: int, seq_len: int, available: int | None) -> int | None:
    """The bytes a training step of `entry` needs at least where that is more than `available`, else
    None. At least: every parameter at `PER_PARAMETER`, and the activations the backward pass keeps
    at least, each layer's hidden states and the logits with their gradient (`activation_bytes`;
    every cell keeps more). The parameters are bounded from both sides without PyTorch
    (`weight_count`); only where the bounds straddle `available` is the model built on PyTorch's meta
    device and counted exactly."""
    activations = activation_bytes(vocab, entry.hidden, entry.layers, batch, seq_len)
    recurrent = entry.kind == RECURRENT
    shape = (vocab, entry.embd, entry.hidden, entry.layers, recurrent)
    low = weight_count(*shape, gates=1, window=entry.window) * PER_PARAMETER + activations
    high = weight_count(*shape, gates=MOST_GATES, own_state=True, window=entry.window) * PER_PARAMETER + activations
    if available is None or high <= available:
        return None
    need = low if low > available else _exact_parameters(entry, vocab) * PER_PARAMETER + activations  # straddled
    return need if need > available else None


def weight_count(vocab: int, embd: int, hidden: int, layers: int, recurrent: bool, gates: int,
                 own_state: bool = False, window: int = 0) -> int:
    """The embedding's and the output layer's weights, the fixed-window MLP's first layer (its
    `window` embeddings in), and for a recurrent model `gates` input weight matrices per layer; with
    `own_state`, per layer `gates` full hidden-to-hidden matrices and biases more, and a padding
    embedding. With one gate and no `own_state`, fewer than any model here has (an IndRNN's recurrent
    weights are a diagonal); with `MOST_GATES` and `own_state`, no fewer."""
    count = vocab * embd + hidden * vocab + vocab + window * embd * hidden
    if recurrent:
        count += sum(gates * hidden * (embd if layer == 0 else hidden) for layer in range(layers))
    if own_state:
        count += embd + layers * gates * hidden * (hidden + 2)
    return count


def activation_bytes(vocab: int, hidden: int, layers: int, batch: int, seq_len: int) -> int:
    """What a step's backward pass keeps at least: each layer's hidden states and the logits with their
    gradient, batch x seq_len of each, float32."""
    return batch * seq_len * (layers * hidden + 2 * vocab) * FLOAT32


def _exact_parameters(entry: ModelParams, vocab: int) -> int:
    """The parameters of `entry`'s model, built on PyTorch's meta device (no memory whatever its size)."""
    from rnnlm.models.kinds import build_model, count_parameters, on_meta  # PyTorch: only when the bounds straddle

    with on_meta():
        return count_parameters(build_model(entry.model_config(vocab)))


def _device_memory(setting: str) -> tuple[str, int | None]:
    """The kind of device `train.device` resolves to ("cpu" or "cuda") and its free bytes (None where
    unknown); ParamsError for `cuda` where PyTorch sees no GPU."""
    if setting == "cpu" or (setting == "auto" and not NVIDIA_DRIVER.exists()):
        return "cpu", available_memory()
    import torch  # only here: a GPU may be there

    if not torch.cuda.is_available():
        if setting == "cuda":
            raise ParamsError("train.device: 'cuda' but PyTorch sees no CUDA GPU here; expected 'auto' or 'cpu'")
        return "cpu", available_memory()
    return "cuda", torch.cuda.mem_get_info()[0]
