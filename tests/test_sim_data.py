"""Data loading: the embedded MNIST subset, IDX folders (raw, .gz, torchvision layout), .npz, digits, errors."""

from __future__ import annotations

import gzip
import struct

import numpy as np
import pytest
import torch
from sim_helpers import mnist5k

from geodrift.errors import GeodriftError
from geodrift.sim.data import ShuffledBatches, load_dataset


def _idx(array: np.ndarray) -> bytes:
    header = b"\x00\x00\x08" + bytes([array.ndim]) + b"".join(struct.pack(">I", n) for n in array.shape)
    return header + array.astype(np.uint8).tobytes()


def _write_set(folder, prefix="", gz=False, n_train=20, n_test=10, classes=10, test_stem="t10k"):
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    arrays = {
        "train-images-idx3-ubyte": rng.integers(0, 256, (n_train, 28, 28)),
        "train-labels-idx1-ubyte": np.arange(n_train) % classes,
        f"{test_stem}-images-idx3-ubyte": rng.integers(0, 256, (n_test, 28, 28)),
        f"{test_stem}-labels-idx1-ubyte": np.arange(n_test) % classes,
    }
    for name, arr in arrays.items():
        payload = _idx(np.asarray(arr))
        path = folder / f"{prefix}{name}{'.gz' if gz else ''}"
        path.write_bytes(gzip.compress(payload) if gz else payload)
    return arrays


def test_mnist5k_split_is_fixed_stratified_and_disjoint():
    a, b = load_dataset("mnist5k"), mnist5k()
    assert a.x_train.shape == (4000, 784) and a.x_test.shape == (1000, 784)
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.y_test, b.y_test)
    assert a.y_train.bincount().tolist() == [400] * 10
    assert a.n_classes == 10
    # no test image is also a training image (the subset has no exact duplicates across the split)
    train_rows = {row.numpy().tobytes() for row in a.x_train}
    assert not any(row.numpy().tobytes() in train_rows for row in a.x_test)


def test_normalisation_uses_training_statistics():
    ds = mnist5k()
    assert float(ds.x_train.mean()) == pytest.approx(0.0, abs=1e-4)
    assert float(ds.x_train.std()) == pytest.approx(1.0, abs=1e-3)


@pytest.mark.parametrize("gz", [False, True])
def test_idx_folder_raw_or_gzip_is_read(tmp_path, gz):
    arrays = _write_set(tmp_path / "mnist", gz=gz)
    ds = load_dataset(str(tmp_path / "mnist"))
    assert ds.x_train.shape == (20, 784) and ds.x_test.shape == (10, 784)
    assert ds.y_train.tolist() == arrays["train-labels-idx1-ubyte"].tolist()


def test_torchvision_layout_and_test_images_name_are_found(tmp_path):
    _write_set(tmp_path / "FashionMNIST" / "raw", test_stem="test")
    assert load_dataset(str(tmp_path)).x_test.shape == (10, 784)


def test_emnist_labels_are_remapped_and_ambiguous_folders_ask_for_a_prefix(tmp_path):
    raw = tmp_path / "EMNIST" / "raw"
    _write_set(raw, prefix="emnist-letters-", classes=26)
    _write_set(raw, prefix="emnist-digits-")
    with pytest.raises(GeodriftError, match="several IDX sets"):
        load_dataset(str(tmp_path))
    ds = load_dataset(str(raw / "emnist-letters-"))
    assert ds.n_classes == 20  # labels present (0..19 of 26) are remapped densely to 0..19


def test_npz_in_keras_layout_is_read_and_missing_keys_are_named(tmp_path):
    rng = np.random.default_rng(1)
    good = tmp_path / "mnist.npz"
    np.savez(good, x_train=rng.integers(0, 256, (30, 28, 28)), y_train=np.arange(30) % 10,
             x_test=rng.integers(0, 256, (10, 28, 28)), y_test=np.arange(10) % 10)
    assert load_dataset(str(good)).x_train.shape == (30, 784)
    bad = tmp_path / "bad.npz"
    np.savez(bad, x_train=np.zeros((3, 4)))
    with pytest.raises(GeodriftError, match="y_train"):
        load_dataset(str(bad))


def test_corrupt_or_missing_idx_files_raise_geodrift_errors(tmp_path):
    _write_set(tmp_path / "a")
    (tmp_path / "a" / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(GeodriftError, match="test_labels"):
        load_dataset(str(tmp_path / "a"))
    _write_set(tmp_path / "b")
    target = tmp_path / "b" / "train-images-idx3-ubyte"
    target.write_bytes(target.read_bytes()[:-5])
    with pytest.raises(GeodriftError, match="truncated"):
        load_dataset(str(tmp_path / "b"))
    _write_set(tmp_path / "c")
    target = tmp_path / "c" / "train-labels-idx1-ubyte"
    target.write_bytes(b"\x12\x34" + target.read_bytes()[2:])
    with pytest.raises(GeodriftError, match="magic"):
        load_dataset(str(tmp_path / "c"))
    with pytest.raises(GeodriftError, match="no such"):
        load_dataset(str(tmp_path / "nowhere" / "x"))
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(GeodriftError, match="junk.npz"):
        load_dataset(str(tmp_path / "junk.npz"))


def test_sklearn_digits_load_with_the_same_split_rule():
    ds = load_dataset("digits")
    assert ds.in_dim == 64 and ds.n_classes == 10
    assert len(ds.y_train) + len(ds.y_test) == 1797


def test_batches_are_a_pure_function_of_seed_and_step():
    ds = mnist5k()
    a, b = ShuffledBatches(ds, [1, 2], 128), ShuffledBatches(ds, [1, 2], 128)
    for step in (0, 5, 31, 32, 400):
        xa, ya = a.batch(step)
        xb, yb = b.batch(step)
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
        assert xa.shape == (2, 128, 784)
    x, _ = a.batch(0)
    assert not torch.equal(x[0], x[1])  # members get their own order
    # one data epoch visits every image of a member at most once
    seen = torch.cat([a._permutation(1, 0)[i * 128:(i + 1) * 128] for i in range(a.steps_per_epoch)])
    assert len(set(seen.tolist())) == len(seen)
