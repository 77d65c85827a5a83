"""The LeNet variant of the data-parallel training reference (d2l §13.5).

Architecture, for a 1x28x28 input (shapes per sample)::

    conv 3x3, 1 -> 20 channels   -> 20x26x26, ReLU, average pool 2x2 stride 2 -> 20x13x13
    conv 5x5, 20 -> 50 channels  -> 50x9x9,   ReLU, average pool 2x2 stride 2 -> 50x4x4
    flatten (800) -> linear 800 -> 128, ReLU -> linear 128 -> 10 (logits)

Initialisation as in the reference: every weight ~ N(0, 0.01^2), every bias 0. The
weights are drawn from a caller-supplied ``numpy.random.Generator`` (not torch's global
RNG), so every replica built from the same seed is bitwise identical, on any machine.
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

INPUT_SIZE = 28
NUM_CLASSES = 10
INIT_SCALE = 0.01


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


def init_lenet_(model: nn.Module, rng: np.random.Generator, scale: float = INIT_SCALE) -> nn.Module:
    """Re-initialise ``model`` in place: weights ~ N(0, scale^2) from ``rng``, biases 0.

    Parameters are visited in ``named_parameters()`` order, so the same seed gives the
    same model everywhere. Returns the model.
    """
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("bias"):
                param.zero_()
            else:
                values = rng.standard_normal(tuple(param.shape)).astype(np.float32) * np.float32(scale)
                param.copy_(torch.from_numpy(values))
    return model


def make_lenet(seed: int, scale: float = INIT_SCALE) -> LeNet:
    """A freshly initialised :class:`LeNet`; equal seeds give bitwise-equal models."""
    return init_lenet_(LeNet(), np.random.default_rng(seed), scale)  # type: ignore[return-value]


def num_parameters(model: nn.Module) -> int:
    """Number of trainable scalars."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def flat_parameters(model: nn.Module) -> torch.Tensor:
    """All parameters concatenated into one detached float32 CPU vector (a copy)."""
    return torch.cat([p.detach().reshape(-1).to("cpu", torch.float32) for p in model.parameters()])


def parameter_digest(model: nn.Module) -> str:
    """SHA-256 of the parameters' raw bytes: equal digests mean bitwise-identical replicas."""
    return hashlib.sha256(flat_parameters(model).numpy().tobytes()).hexdigest()
