"""The CIFAR-10 reader against files written in the published python-pickle format."""

import pickle

import numpy as np
import pytest

from dlscale.trainers.common.data import DataError, load_digits, read_cifar10


def write_cifar_batch(path, n, seed, label_key=b"labels"):
    """Exactly the layout of cifar-10-batches-py: a pickled dict with bytes keys, data as
    N x 3072 uint8 rows (1024 red, 1024 green, 1024 blue, row-major)."""
    rng = np.random.default_rng(seed)
    batch = {
        b"batch_label": b"training batch",
        label_key: rng.integers(0, 10, n).tolist(),
        b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
        b"filenames": [f"img_{i}.png".encode() for i in range(n)],
    }
    with open(path, "wb") as fh:
        pickle.dump(batch, fh, protocol=2)
    return batch


def make_cifar(folder, n=4):
    folder.mkdir(exist_ok=True)
    batches = [write_cifar_batch(folder / f"data_batch_{i}", n, i) for i in range(1, 6)]
    test = write_cifar_batch(folder / "test_batch", n, 99)
    return batches, test


def test_reads_all_batches_in_order(tmp_path):
    batches, test = make_cifar(tmp_path / "cifar-10-batches-py")
    train, test_split = read_cifar10(str(tmp_path / "cifar-10-batches-py"))
    assert train.images.shape == (20, 3, 32, 32) and train.images.dtype == np.uint8
    assert test_split.images.shape == (4, 3, 32, 32)
    assert train.labels.tolist() == sum((b[b"labels"] for b in batches), [])
    # channel planes: the first 1024 bytes of a row are the red plane
    assert (train.images[0, 0].ravel() == batches[0][b"data"][0, :1024]).all()
    assert (train.images[5, 2].ravel() == batches[1][b"data"][1, 2048:]).all()


def test_missing_batch_names_the_file(tmp_path):
    make_cifar(tmp_path)
    (tmp_path / "data_batch_3").unlink()
    with pytest.raises(DataError, match="data_batch_3: missing"):
        read_cifar10(str(tmp_path))


def test_wrong_layout_is_refused(tmp_path):
    make_cifar(tmp_path)
    write_cifar_batch(tmp_path / "test_batch", 4, 1, label_key=b"fine_labels")  # CIFAR-100
    with pytest.raises(DataError, match="test_batch: not a CIFAR-10 batch"):
        read_cifar10(str(tmp_path))
    (tmp_path / "data_batch_1").write_bytes(b"garbage")
    with pytest.raises(DataError, match="data_batch_1: not a CIFAR-10 pickle"):
        read_cifar10(str(tmp_path))


@pytest.mark.framework  # scikit-learn (the torch extra) loads the digits
def test_digits_are_32px_rgb_and_split_per_class():
    train, test = load_digits(seed=0)
    assert train.images.shape[1:] == (3, 32, 32) and train.images.dtype == np.uint8
    assert len(train.labels) + len(test.labels) == 1797
    assert set(test.labels.tolist()) == set(range(10))
    assert 0.18 < len(test.labels) / 1797 < 0.22
    assert train.images.max() == 255
