"""The LeNet variant of the data-parallel training reference (d2l §13.5).

Architecture, for a 1x28x28 input (shapes per sample)::

    conv 3x3, 1 -> 20 channels   -> 20x26x26, ReLU, average pool 2x2 stride 2 -> 20x13x13
    conv 5x5, 20 -> 50 channels  -> 50x9x9,   ReLU, average pool 2x2 stride 2 -> 50x4x4
    flatten (800) -> linear 800 -> 128, ReLU -> linear 128 -> 10 (logits)

Initialisation (:data:`INIT_SCHEMES`), biases always 0, weights normal with standard deviation

- ``"reference"``: 0.01, as in the reference;
- ``"he"`` (default): ``sqrt(2 / fan_in)`` (He et al. 2015, suited to ReLU). With the
  reference's 0.01 the signal through four layers is so small that SGD needs hundreds of
  steps to leave chance level; on the 1,438 training digits that is more than 6 epochs
  (docs/training.md shows the measurement), so the short runs of ``panama train`` use He.

The weights are drawn from a caller-supplied ``numpy.random.Generator`` (not torch's
global RNG), so every replica built from the same seed is bitwise identical, on any machine.
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from panama.core.errors import FieldError

INPUT_SIZE = 28
NUM_CLASSES = 10
INIT_SCALE = 0.01
INIT_SCHEMES = ("he", "reference")


class LeNet(nn.Module):
    """Reference LeNet variant (ReLU activations, average pooling); input ``(N, 1, 28, 28)``."""

    def __init__(self, num_classes: int = NUM_CLASSES):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 20, kernel_size=3)
        self.conv2 = nn.Conv2d(20, 50, kernel_size=5)
        self.fc1 = nn.Linear(50 * 4 * 4, 128)
        self.fc2 = nn.Linear(128, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 4 or x.shape[1:] != (1, INPUT_SIZE, INPUT_SIZE):
            raise ValueError(f"LeNet expects input of shape (N, 1, {INPUT_SIZE}, {INPUT_SIZE}), got {tuple(x.shape)}")
        h = F.avg_pool2d(F.relu(self.conv1(x)), kernel_size=2, stride=2)
        h = F.avg_pool2d(F.relu(self.conv2(h)), kernel_size=2, stride=2)
        h = F.relu(self.fc1(h.flatten(1)))
        return self.fc2(h)


def init_lenet_(model: nn.Module, rng: np.random.Generator, scheme: str = "he") -> nn.Module:
    """Re-initialise ``model`` in place (``scheme`` in :data:`INIT_SCHEMES`); returns it.

    Parameters are visited in ``named_parameters()`` order and drawn from ``rng``, so the
    same generator state gives the same model everywhere.
    """
    if scheme not in INIT_SCHEMES:
        raise FieldError("init", f"unknown scheme {scheme!r}, expected one of {', '.join(INIT_SCHEMES)}")
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("bias"):
                param.zero_()
                continue
            fan_in = param[0].numel()  # in_features, or in_channels * kernel area
            std = INIT_SCALE if scheme == "reference" else float(np.sqrt(2.0 / fan_in))
            values = rng.standard_normal(tuple(param.shape)).astype(np.float32) * np.float32(std)
            param.copy_(torch.from_numpy(values))
    return model


def make_lenet(seed: int | np.random.Generator, scheme: str = "he") -> LeNet:
    """A freshly initialised :class:`LeNet`; equal seeds give bitwise-equal models."""
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    return init_lenet_(LeNet(), rng, scheme)  # type: ignore[return-value]


def num_parameters(model: nn.Module) -> int:
    """Number of trainable scalars."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def flat_parameters(model: nn.Module) -> torch.Tensor:
    """All parameters concatenated into one detached float32 CPU vector (a copy)."""
    return torch.cat([p.detach().reshape(-1).to("cpu", torch.float32) for p in model.parameters()])


def parameter_digest(model: nn.Module) -> str:
    """SHA-256 of the parameters' raw bytes: equal digests mean bitwise-identical replicas."""
    return hashlib.sha256(flat_parameters(model).numpy().tobytes()).hexdigest()
