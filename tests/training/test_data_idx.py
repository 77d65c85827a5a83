"""IDX reader/writer, Fashion-MNIST directory loader and the digits dataset."""

from __future__ import annotations

import gzip
import struct

import numpy as np
import pytest
import torch

from panama.training.data import (
    FASHION_MNIST_FILES,
    IdxFormatError,
    load_digits,
    load_fashion_mnist,
    parse_idx,
    read_idx,
    stratified_split,
    write_idx,
)


def _fake_fashion_dir(path, n_train=12, n_test=5, size=28, gz=False, seed=0):
    rng = np.random.default_rng(seed)
    arrays = {
        "train_images": rng.integers(0, 256, size=(n_train, size, size), dtype=np.uint8),
        "train_labels": rng.integers(0, 10, size=n_train, dtype=np.uint8),
        "test_images": rng.integers(0, 256, size=(n_test, size, size), dtype=np.uint8),
        "test_labels": rng.integers(0, 10, size=n_test, dtype=np.uint8),
    }
    for key, array in arrays.items():
        write_idx(path / (FASHION_MNIST_FILES[key] + (".gz" if gz else "")), array)
    return arrays


@pytest.mark.parametrize("dtype", ["u1", "i1", ">i2", ">i4", ">f4", ">f8", "<f4", "<i4"])
@pytest.mark.parametrize("compress", [False, True])
def test_idx_roundtrip(tmp_path, dtype, compress):
    rng = np.random.default_rng(1)
    array = (rng.standard_normal((3, 4, 5)) * 100).astype(dtype)
    path = write_idx(tmp_path / ("a.idx.gz" if compress else "a.idx"), array)
    back = read_idx(path)
    assert back.shape == (3, 4, 5)
    assert back.dtype.kind == np.dtype(dtype).kind and back.dtype.isnative
    np.testing.assert_array_equal(back, array)


def test_idx_header_is_the_lecun_format(tmp_path):
    path = write_idx(tmp_path / "labels", np.array([7, 2, 1], dtype=np.uint8))
    assert path.read_bytes() == b"\x00\x00\x08\x01" + struct.pack(">I", 3) + bytes([7, 2, 1])
    array = np.arange(6, dtype=">i4").reshape(2, 3)
    raw = b"\x00\x00\x0c\x02" + struct.pack(">II", 2, 3) + array.tobytes()
    np.testing.assert_array_equal(parse_idx(raw), array)


@pytest.mark.parametrize(
    ("blob", "message"),
    [
        (b"\x00\x00", "too short"),
        (b"\x01\x00\x08\x01" + struct.pack(">I", 1) + b"\x00", "bad magic"),
        (b"\x00\x00\x07\x01" + struct.pack(">I", 1) + b"\x00", "unknown IDX type code 0x07"),
        (b"\x00\x00\x08\x00", "0 dimensions"),
        (b"\x00\x00\x08\x03" + struct.pack(">I", 2), "truncated header"),
        (b"\x00\x00\x08\x02" + struct.pack(">II", 2, 3) + b"\x00" * 5, "truncated data"),
        (b"\x00\x00\x0d\x01" + struct.pack(">I", 2) + b"\x00" * 9, "1 unexpected trailing bytes"),
        (b"\x00\x00\x0e\x04" + struct.pack(">IIII", *[2**32 - 1] * 4) + b"\x00" * 8, "truncated data"),
    ],
)
def test_corrupt_idx_files_raise_naming_the_file(tmp_path, blob, message):
    path = tmp_path / "t10k-images-idx3-ubyte"
    path.write_bytes(blob)
    with pytest.raises(IdxFormatError, match=message) as exc:
        read_idx(path)
    assert str(path) in str(exc.value) and exc.value.path == path


def test_corrupt_gzip_and_missing_files(tmp_path):
    good = gzip.compress(b"\x00\x00\x08\x01" + struct.pack(">I", 100) + bytes(100))
    bad = tmp_path / "train-labels-idx1-ubyte.gz"
    bad.write_bytes(good[: len(good) // 2])  # truncated gzip stream
    with pytest.raises(IdxFormatError, match="corrupt gzip data") as exc:
        read_idx(bad)
    assert "train-labels-idx1-ubyte.gz" in str(exc.value)
    fake = tmp_path / "x.gz"
    fake.write_bytes(b"\x00\x00\x08\x01" + struct.pack(">I", 1) + b"\x00")
    with pytest.raises(IdxFormatError, match="not gzip data"):
        read_idx(fake)
    with pytest.raises(IdxFormatError, match="file not found"):
        read_idx(tmp_path / "nope")


@pytest.mark.parametrize("gz", [False, True])
def test_load_fashion_mnist_from_generated_files(tmp_path, gz):
    arrays = _fake_fashion_dir(tmp_path, gz=gz)
    data = load_fashion_mnist(tmp_path)
    assert data.name == "fashion-mnist" and data.num_train == 12 and data.num_test == 5
    assert data.train_images.shape == (12, 1, 28, 28) and data.train_images.dtype == torch.float32
    assert data.train_labels.dtype == torch.int64
    np.testing.assert_array_equal(data.train_labels.numpy(), arrays["train_labels"])
    np.testing.assert_allclose(data.test_images[:, 0].numpy(), arrays["test_images"] / 255.0, rtol=0, atol=1e-7)


def test_load_fashion_mnist_resizes_other_image_sizes(tmp_path):
    _fake_fashion_dir(tmp_path, size=14)
    data = load_fashion_mnist(tmp_path)
    assert data.train_images.shape == (12, 1, 28, 28)
    assert float(data.train_images.min()) >= 0.0 and float(data.train_images.max()) <= 1.0


def test_load_fashion_mnist_consistency_errors(tmp_path):
    _fake_fashion_dir(tmp_path)
    labels = tmp_path / FASHION_MNIST_FILES["train_labels"]
    write_idx(labels, np.zeros(11, dtype=np.uint8))
    with pytest.raises(IdxFormatError, match="11 labels for 12 images") as exc:
        load_fashion_mnist(tmp_path)
    assert exc.value.path == labels
    write_idx(labels, np.full(12, 10, dtype=np.uint8))
    with pytest.raises(IdxFormatError, match="label 10 out of range"):
        load_fashion_mnist(tmp_path)
    write_idx(labels, np.zeros((12, 1), dtype=np.uint8))
    with pytest.raises(IdxFormatError, match="1-D uint8 label"):
        load_fashion_mnist(tmp_path)
    write_idx(labels, np.zeros(12, dtype=np.uint8))
    images = tmp_path / FASHION_MNIST_FILES["test_images"]
    write_idx(images, np.zeros((5, 28, 28), dtype=">f4"))
    with pytest.raises(IdxFormatError, match="3-D uint8 image") as exc:
        load_fashion_mnist(tmp_path)
    assert exc.value.path == images
    images.unlink()
    with pytest.raises(IdxFormatError, match="t10k-images-idx3-ubyte.gz"):
        load_fashion_mnist(tmp_path)
    with pytest.raises(IdxFormatError, match="not a directory"):
        load_fashion_mnist(tmp_path / "missing")


def test_digits_split_is_fixed_stratified_and_disjoint():
    a, b = load_digits(), load_digits()
    assert a.num_train + a.num_test == 1797
    assert a.num_test == pytest.approx(0.2 * 1797, abs=10)
    assert torch.equal(a.train_labels, b.train_labels) and torch.equal(a.test_images, b.test_images)
    assert a.train_images.shape[1:] == (1, 28, 28)
    assert 0.0 <= float(a.train_images.min()) and float(a.train_images.max()) <= 1.0
    counts = torch.bincount(a.test_labels, minlength=10)
    assert int(counts.min()) >= 34 and int(counts.max()) <= 38  # ~20% of each ~180-example class


def test_stratified_split_partitions_indices():
    labels = np.repeat(np.arange(3), [10, 20, 30])
    train, test = stratified_split(labels, 0.2, np.random.default_rng(0))
    assert sorted(np.concatenate([train, test]).tolist()) == list(range(60))
    assert np.bincount(labels[test]).tolist() == [2, 4, 6]
    with pytest.raises(ValueError, match="test_fraction"):
        stratified_split(labels, 1.0, np.random.default_rng(0))
