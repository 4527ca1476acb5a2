import gzip
import struct

import numpy as np
import pytest
import torch

from tasks import ClassificationConfig, ClassificationTask, DataError
from tasks.data import EpochBatches, TensorImages, read_fashion_mnist, Augment


def write_idx(path, array):
    header = struct.pack(">BBBB", 0, 0, 8, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


@pytest.fixture
def fake_fmnist(tmp_path):
    rng = np.random.default_rng(0)
    for prefix, n in (("train", 300), ("t10k", 100)):
        labels = rng.integers(0, 10, n)
        images = (labels[:, None, None] * 20 + rng.integers(0, 40, (n, 28, 28))).clip(0, 255)
        write_idx(tmp_path / f"{prefix}-images-idx3-ubyte.gz", images)
        write_idx(tmp_path / f"{prefix}-labels-idx1-ubyte.gz", labels)
    return tmp_path


def test_idx_reader(fake_fmnist):
    images, labels = read_fashion_mnist(fake_fmnist, train=True)
    assert images.shape == (300, 1, 28, 28) and images.dtype == np.uint8 and labels.shape == (300,)


def test_missing_data_says_how_to_install(tmp_path):
    with pytest.raises(DataError, match="apt-get install dataset-fashion-mnist"):
        read_fashion_mnist(tmp_path, train=True)


def test_truncated_idx_is_an_error(fake_fmnist):
    path = fake_fmnist / "train-images-idx3-ubyte.gz"
    data = gzip.decompress(path.read_bytes())
    path.write_bytes(gzip.compress(data[:-10]))
    with pytest.raises(DataError, match="truncated"):
        read_fashion_mnist(fake_fmnist, train=True)


def test_task_splits_and_top1(fake_fmnist):
    task = ClassificationTask(ClassificationConfig(root=str(fake_fmnist), val_size=50, calib_images=64), seed=0)
    assert len(task.train) == 250 and len(task.val) == 50 and len(task.test) == 100
    assert task.input_shape == (1, 28, 28) and task.num_outputs == 10
    assert sum(x.shape[0] for x in task.calibration_batches()) == 64

    class Oracle(torch.nn.Module):  # a "model" that reads the label off the pixel level
        def forward(self, x):
            level = (x * 0.3530 + 0.2860) * 255
            label = ((level.mean((1, 2, 3)) - 20) / 20).round().clamp(0, 9).long()
            return torch.nn.functional.one_hot(label, 10).float()

    class AlwaysZero(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.one_hot(torch.zeros(len(x), dtype=torch.long), 10).float()

    _, test_labels = read_fashion_mnist(fake_fmnist, train=False)
    assert task.evaluate(Oracle(), "test") == 100.0
    assert task.evaluate(AlwaysZero(), "test") == 100.0 * np.mean(test_labels == 0)


def test_test_images_cut_the_test_split_for_every_test_metric(fake_fmnist):
    """`test_images` keeps the test split's first N images; a trained baseline's cache entry tells the cuts apart
    and keeps its key for the whole split."""
    from nas.baselines.cache import cache_key
    from nas.training.supernet_training import TrainConfig

    cut = ClassificationConfig(root=str(fake_fmnist), val_size=50, calib_images=64, test_images=40)
    task = ClassificationTask(cut, seed=0)
    _, test_labels = read_fashion_mnist(fake_fmnist, train=False)

    class AlwaysZero(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.one_hot(torch.zeros(len(x), dtype=torch.long), 10).float()

    assert len(task.test) == 40 and task.evaluate(AlwaysZero(), "test") == 100.0 * np.mean(test_labels[:40] == 0)
    with pytest.raises(DataError, match="test_images 101 exceeds the 100 test images"):
        ClassificationTask(ClassificationConfig(root=str(fake_fmnist), val_size=50, test_images=101), seed=0)
    whole = ClassificationConfig(root=str(fake_fmnist), val_size=50, calib_images=64)
    keys = [cache_key({"network": "resnet18"}, (1, 28, 28), 10, config, TrainConfig(), 0) for config in (cut, whole)]
    assert keys[0]["task"]["test_images"] == 40 and "test_images" not in keys[1]["task"]


def test_unknown_dataset_and_bad_sizes(fake_fmnist):
    with pytest.raises(DataError, match="valid: fashion_mnist"):
        ClassificationTask(ClassificationConfig(dataset="mnist3d", root=str(fake_fmnist)), seed=0)
    with pytest.raises(DataError, match="val_size"):
        ClassificationTask(ClassificationConfig(root=str(fake_fmnist), val_size=1000), seed=0)


def test_epoch_batches_are_deterministic_and_resumable(fake_fmnist):
    images, labels = read_fashion_mnist(fake_fmnist, train=True)
    source = TensorImages(images, labels, 10, (0.5,), (0.5,), Augment(crop_padding=2, hflip=True))
    batches = EpochBatches(source, 32, seed=3)
    full = list(batches(epoch=1))
    again = list(batches(epoch=1))
    resumed = list(batches(epoch=1, start_step=4))
    assert len(full) == 300 // 32
    for (s1, x1, y1), (s2, x2, y2) in zip(full, again):
        assert torch.equal(x1, x2) and torch.equal(y1, y2)
    for (s1, x1, y1), (s2, x2, y2) in zip(full[4:], resumed):
        assert s1 == s2 and torch.equal(x1, x2) and torch.equal(y1, y2)
    other_epoch = list(batches(epoch=2))
    assert not torch.equal(full[0][2], other_epoch[0][2])
    ahead = EpochBatches(source, 32, seed=3, workers=2)  # built in two loader processes: the same batches
    for (s1, x1, y1), (s2, x2, y2) in zip(full[4:], ahead(epoch=1, start_step=4), strict=True):
        assert s1 == s2 and torch.equal(x1, x2) and torch.equal(y1, y2)


def test_augmentation_crops_and_flips_within_bounds():
    images = np.zeros((8, 1, 6, 6), dtype=np.uint8)
    images[:, :, 2:4, 2:4] = 255
    source = TensorImages(images, np.zeros(8, dtype=np.int64), 10, (0.0,), (1.0,), Augment(crop_padding=1, hflip=True))
    x, _ = source.get_batch(np.arange(8), seed=5)
    assert x.shape == (8, 1, 6, 6)
    assert torch.all(x.sum((1, 2, 3)) == 4)  # the bright square is shifted by at most 1 pixel, never cut
    plain, _ = source.get_batch(np.arange(8), seed=None)
    assert torch.all(plain[:, :, 2:4, 2:4] == 1)
