"""The arrays an allreduce takes and gives: float32 numpy arrays and CPU torch tensors as flat vectors.

Used by :class:`panama.runtime.worker.communicator.Communicator`; torch is imported only when a
tensor is passed (the runtime works without it).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def as_float32_vector(x: Any) -> tuple[np.ndarray, Any]:
    """A contiguous 1-D float32 view/copy of ``x`` and a function turning the result back."""
    if isinstance(x, np.ndarray):
        if x.dtype != np.float32:
            raise TypeError(f"allreduce supports float32 arrays only, got dtype {x.dtype}")
        shape = x.shape
        flat = np.ascontiguousarray(x).reshape(-1)
        return flat, lambda out: out.reshape(shape)
    mod = type(x).__module__
    if mod.startswith("torch"):
        import torch  # lazy: the runtime works without torch

        if not isinstance(x, torch.Tensor):
            raise TypeError(f"allreduce supports numpy arrays and torch tensors, got {type(x).__name__}")
        if x.dtype != torch.float32:
            raise TypeError(f"allreduce supports float32 tensors only, got {x.dtype}")
        if x.device.type != "cpu":
            raise TypeError(f"allreduce supports CPU tensors only, got device {x.device}")
        shape = x.shape
        flat = x.detach().contiguous().reshape(-1).numpy()
        return flat, lambda out: torch.from_numpy(out).reshape(shape)
    raise TypeError(f"allreduce supports float32 numpy arrays and CPU torch tensors, got {type(x).__name__}")


def as_output_vector(out: Any, size: int) -> np.ndarray:
    """A writable 1-D float32 view of ``out`` (numpy array or CPU torch tensor) of ``size`` elements."""
    if isinstance(out, np.ndarray):
        if out.dtype != np.float32 or out.size != size or not out.flags.c_contiguous or not out.flags.writeable:
            raise TypeError(f"out must be a writable C-contiguous float32 array of {size} elements")
        return out.reshape(-1)
    if type(out).__module__.startswith("torch"):
        import torch

        if (
            not isinstance(out, torch.Tensor)
            or out.dtype != torch.float32
            or out.device.type != "cpu"
            or out.numel() != size
            or not out.is_contiguous()
        ):
            raise TypeError(f"out must be a contiguous CPU float32 tensor of {size} elements")
        return out.detach().reshape(-1).numpy()
    raise TypeError(f"out must be a float32 numpy array or CPU torch tensor, got {type(out).__name__}")
