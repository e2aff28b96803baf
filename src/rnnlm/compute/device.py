"""Which device runs, and at what float32 precision its matrix products run.

- `resolve_device(setting)`: params' `train.device` ("auto", "cpu", "cuda") -> a torch.device.
- `device_for(train_settings)`: the device that params' `train:` block asks for, with its float32
  precision set; what the train, generate and evaluate stages run on.
- `make_cuda_repeatable()`: the settings under which CUDA runs repeat bit for bit.
- `set_float32_precision(allow_tf32)`: float32 matrix products on CUDA (cuBLAS and cuDNN) exact
  (IEEE float32, the default here) or allowed to use TF32's 10-bit mantissa. Process-wide: it is
  set once by the command that trains or measures. The CPU has no TF32; it is untouched there.
"""

from __future__ import annotations

import os

import torch

from rnnlm.errors import RnnlmError


class DeviceError(RnnlmError):
    """The requested device is not there."""


def resolve_device(setting: str, named: str = "train.device") -> torch.device:
    """`auto`: CUDA if a GPU is present, else the CPU; `cuda` without a GPU is an error naming where
    the setting came from (`named`: the params key, or a command's option)."""
    if setting == "cuda" and not torch.cuda.is_available():
        raise DeviceError(f"{named} is 'cuda' but no CUDA GPU is available; use 'auto' or 'cpu'")
    if setting == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(setting)


def set_float32_precision(allow_tf32: bool) -> str:
    """Exact float32 products on CUDA ("ieee"), or TF32 allowed ("tf32"); returns which was set."""
    precision = "tf32" if allow_tf32 else "ieee"
    if hasattr(torch.backends.cuda.matmul, "fp32_precision"):  # PyTorch 2.9 and later
        torch.backends.cuda.matmul.fp32_precision = precision
        torch.backends.cudnn.fp32_precision = precision
        torch.backends.cudnn.rnn.fp32_precision = precision  # cuDNN's recurrent kernels, the speed yardstick
    else:
        torch.backends.cuda.matmul.allow_tf32 = allow_tf32
        torch.backends.cudnn.allow_tf32 = allow_tf32
    return precision


CUBLAS_WORKSPACE = ":4096:8"
"""cuBLAS's workspace setting for bit-identical reruns: with its default, a product's result can
depend on which stream ran before on the same handle (NVIDIA's cuBLAS notes on reproducibility)."""


def make_cuda_repeatable() -> None:
    """Ask CUDA for the same bits on every run: cuBLAS's fixed workspace (`CUBLAS_WORKSPACE_CONFIG`,
    read when cuBLAS starts, so call this before the first product; a value already set is kept)
    and PyTorch's deterministic algorithms, warning (not failing) at any operation that has none.
    Without them, runs of one seed on one GPU agree to about 1e-7 nats, not bit for bit."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    torch.use_deterministic_algorithms(True, warn_only=True)


def device_for(settings) -> torch.device:
    """The device of params' `train:` block (`device`, `allow_tf32`); on CUDA its precision set and
    its arithmetic made repeatable (`make_cuda_repeatable`)."""
    device = resolve_device(settings.device)
    if device.type == "cuda":
        set_float32_precision(settings.allow_tf32)
        make_cuda_repeatable()
    return device
