"""Datasets for ``panama train``: scikit-learn's bundled digits and Fashion-MNIST IDX files.

Both loaders return a :class:`Dataset` of float32 images shaped ``(N, 1, 28, 28)`` with
values in [0, 1] (the LeNet input) and int64 labels in ``[0, 10)``.

- :func:`load_digits`: the 1,797 8x8 digits shipped with scikit-learn (no download),
  scaled from 0..16 to [0, 1], bilinearly resized to 28x28, and split into train/test by
  a stratified permutation drawn from a seeded generator (the split depends only on
  ``split_seed``, not on the training seed, so runs with different seeds share a test set).
- :func:`load_fashion_mnist`: the four standard IDX files in a directory
  (``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte``,
  ``t10k-labels-idx1-ubyte``, each optionally gzip-compressed as ``<name>.gz``).

IDX format (LeCun et al.): two zero bytes, a type code (0x08 uint8, 0x09 int8, 0x0B int16,
0x0C int32, 0x0D float32, 0x0E float64), the number of dimensions, one big-endian uint32
per dimension, then the values big-endian in C order and nothing else. :func:`read_idx`
checks every one of these and raises :class:`IdxFormatError` naming the file.
"""

from __future__ import annotations

import gzip
import math
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

from panama.training.models import INPUT_SIZE, NUM_CLASSES

IDX_DTYPES: dict[int, np.dtype] = {
    0x08: np.dtype("u1"),
    0x09: np.dtype("i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_GZIP_MAGIC = b"\x1f\x8b"

FASHION_MNIST_FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}


class IdxFormatError(ValueError):
    """An IDX file is missing, unreadable or malformed; the message names the file."""

    def __init__(self, path: Path | str, detail: str):
        self.path = Path(path)
        self.detail = detail
        super().__init__(f"{self.path}: {detail}")


@dataclass(frozen=True)
class Dataset:
    """Train and test tensors ready for LeNet; ``source`` says where they came from."""

    name: str
    train_images: torch.Tensor  # float32 (N, 1, 28, 28), values in [0, 1]
    train_labels: torch.Tensor  # int64 (N,)
    test_images: torch.Tensor
    test_labels: torch.Tensor
    source: str

    @property
    def num_train(self) -> int:
        return int(self.train_labels.shape[0])

    @property
    def num_test(self) -> int:
        return int(self.test_labels.shape[0])


# --------------------------------------------------------------------------- IDX files


def _read_bytes(path: Path) -> bytes:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise IdxFormatError(path, "file not found") from None
    except OSError as exc:
        raise IdxFormatError(path, f"cannot read file ({exc.strerror or exc})") from None
    if raw[:2] == _GZIP_MAGIC:
        try:
            return gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise IdxFormatError(path, f"corrupt gzip data ({exc})") from None
    if path.suffix == ".gz":
        raise IdxFormatError(path, "name ends in .gz but the content is not gzip data")
    return raw


def parse_idx(data: bytes, path: Path | str = "<bytes>") -> np.ndarray:
    """Decode one IDX blob into a native-endian array; ``path`` is only used in errors."""
    if len(data) < 4:
        raise IdxFormatError(path, f"too short for an IDX header ({len(data)} bytes, need at least 4)")
    zero0, zero1, type_code, ndim = data[0], data[1], data[2], data[3]
    if zero0 != 0 or zero1 != 0:
        raise IdxFormatError(path, f"bad magic number 0x{data[:4].hex()} (an IDX file starts with two zero bytes)")
    if type_code not in IDX_DTYPES:
        raise IdxFormatError(path, f"unknown IDX type code 0x{type_code:02x}")
    if ndim == 0:
        raise IdxFormatError(path, "IDX header declares 0 dimensions")
    header_bytes = 4 + 4 * ndim
    if len(data) < header_bytes:
        raise IdxFormatError(
            path, f"truncated header: {ndim} dimensions need {header_bytes} bytes, file has {len(data)}"
        )
    dims = struct.unpack(f">{ndim}I", data[4:header_bytes])
    dtype = IDX_DTYPES[type_code]
    expected = math.prod(dims) * dtype.itemsize  # Python ints: a forged header cannot overflow
    actual = len(data) - header_bytes
    if actual < expected:
        raise IdxFormatError(
            path, f"truncated data: shape {dims} of {dtype.name} needs {expected} bytes, found {actual}"
        )
    if actual > expected:
        raise IdxFormatError(path, f"{actual - expected} unexpected trailing bytes after shape {dims} of {dtype.name}")
    array = np.frombuffer(data, dtype=dtype, offset=header_bytes).reshape(dims)
    return array.astype(dtype.newbyteorder("="), copy=True)


def read_idx(path: Path | str) -> np.ndarray:
    """Read an IDX file (plain or gzip-compressed) into a native-endian numpy array.

    Raises :class:`IdxFormatError` naming ``path`` when the file is missing, not valid
    gzip, or not a well-formed IDX file (bad magic, unknown type, truncated or trailing data).
    """
    path = Path(path)
    return parse_idx(_read_bytes(path), path)


def write_idx(path: Path | str, array: np.ndarray, *, compress: bool | None = None) -> Path:
    """Write ``array`` as an IDX file (gzip when ``compress`` or the name ends in ``.gz``)."""
    path = Path(path)
    array = np.asarray(array)
    for code, dtype in IDX_DTYPES.items():
        if array.dtype.kind == dtype.kind and array.dtype.itemsize == dtype.itemsize:
            break
    else:
        raise ValueError(f"dtype {array.dtype} has no IDX type code")
    if not 1 <= array.ndim <= 255:
        raise ValueError(f"IDX supports 1 to 255 dimensions, got {array.ndim}")
    blob = bytes([0, 0, code, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    blob += np.ascontiguousarray(array, dtype=dtype).tobytes()
    if compress or (compress is None and path.suffix == ".gz"):
        blob = gzip.compress(blob, mtime=0)
    path.write_bytes(blob)
    return path


# --------------------------------------------------------------------------- datasets


def to_lenet_input(images: np.ndarray, max_value: float) -> torch.Tensor:
    """``(N, H, W)`` pixel array -> float32 ``(N, 1, 28, 28)`` in [0, 1] (bilinear resize)."""
    x = torch.from_numpy(np.asarray(images, dtype=np.float32) / np.float32(max_value)).unsqueeze(1)
    if x.shape[-2:] != (INPUT_SIZE, INPUT_SIZE):
        x = F.interpolate(x, size=(INPUT_SIZE, INPUT_SIZE), mode="bilinear", align_corners=False)
    return x.clamp_(0.0, 1.0).contiguous()


def stratified_split(
    labels: np.ndarray, test_fraction: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Indices ``(train, test)``: each class contributes ``round(test_fraction * n_class)`` test items."""
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    train, test = [], []
    for cls in np.unique(labels):
        members = np.flatnonzero(labels == cls)
        members = members[rng.permutation(members.size)]
        n_test = int(round(test_fraction * members.size))
        test.append(members[:n_test])
        train.append(members[n_test:])
    train_idx, test_idx = np.concatenate(train), np.concatenate(test)
    return train_idx[rng.permutation(train_idx.size)], test_idx[rng.permutation(test_idx.size)]


def load_digits(*, test_fraction: float = 0.2, split_seed: int = 0) -> Dataset:
    """scikit-learn's bundled 8x8 digits, resized to 28x28, with a fixed stratified split."""
    from sklearn.datasets import load_digits as _sk_load_digits

    bunch = _sk_load_digits()
    images = np.asarray(bunch.images, dtype=np.float32)  # (1797, 8, 8), values 0..16
    labels = np.asarray(bunch.target, dtype=np.int64)
    train_idx, test_idx = stratified_split(labels, test_fraction, np.random.default_rng(split_seed))
    x = to_lenet_input(images, max_value=16.0)
    y = torch.from_numpy(labels)
    return Dataset(
        name="digits",
        train_images=x[train_idx].contiguous(),
        train_labels=y[train_idx].contiguous(),
        test_images=x[test_idx].contiguous(),
        test_labels=y[test_idx].contiguous(),
        source=f"sklearn.datasets.load_digits, stratified split test_fraction={test_fraction} split_seed={split_seed}",
    )


def _find_idx(data_dir: Path, stem: str) -> Path:
    for candidate in (data_dir / stem, data_dir / f"{stem}.gz"):
        if candidate.is_file():
            return candidate
    raise IdxFormatError(data_dir / stem, f"file not found (looked for {stem} and {stem}.gz in {data_dir})")


def _check_images(path: Path, array: np.ndarray) -> np.ndarray:
    if array.dtype != np.uint8 or array.ndim != 3:
        raise IdxFormatError(path, f"expected a 3-D uint8 image array, got {array.ndim}-D {array.dtype}")
    if array.shape[0] == 0 or array.shape[1] == 0 or array.shape[2] == 0:
        raise IdxFormatError(path, f"empty image array of shape {array.shape}")
    return array


def _check_labels(path: Path, array: np.ndarray, num_images: int) -> np.ndarray:
    if array.dtype != np.uint8 or array.ndim != 1:
        raise IdxFormatError(path, f"expected a 1-D uint8 label array, got {array.ndim}-D {array.dtype}")
    if array.shape[0] != num_images:
        raise IdxFormatError(path, f"{array.shape[0]} labels for {num_images} images")
    if array.size and int(array.max()) >= NUM_CLASSES:
        raise IdxFormatError(path, f"label {int(array.max())} out of range [0, {NUM_CLASSES})")
    return array


def load_fashion_mnist(data_dir: Path | str) -> Dataset:
    """Fashion-MNIST (or MNIST) from the four standard IDX files in ``data_dir``.

    The official train/test split is kept. Raises :class:`IdxFormatError` naming the
    offending file when one is missing or malformed, or images and labels disagree.
    """
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise IdxFormatError(data_dir, "not a directory")
    tensors = {}
    for split in ("train", "test"):
        img_path = _find_idx(data_dir, FASHION_MNIST_FILES[f"{split}_images"])
        images = _check_images(img_path, read_idx(img_path))
        lbl_path = _find_idx(data_dir, FASHION_MNIST_FILES[f"{split}_labels"])
        labels = _check_labels(lbl_path, read_idx(lbl_path), images.shape[0])
        tensors[split] = (to_lenet_input(images, max_value=255.0), torch.from_numpy(labels.astype(np.int64)))
    return Dataset(
        name="fashion-mnist",
        train_images=tensors["train"][0],
        train_labels=tensors["train"][1],
        test_images=tensors["test"][0],
        test_labels=tensors["test"][1],
        source=f"IDX files in {data_dir}",
    )


def load_dataset(data_dir: Path | str | None = None) -> Dataset:
    """Fashion-MNIST from ``data_dir`` when given, else the bundled digits."""
    return load_digits() if data_dir is None else load_fashion_mnist(data_dir)
