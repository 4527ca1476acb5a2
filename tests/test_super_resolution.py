"""Super-resolution task: MATLAB-style bicubic resizing, Y conversion, PSNR / SSIM, folder reading, patches."""
import logging

import numpy as np
import pytest
import torch
from skimage import io

from tasks import DataError, build_task
from tasks.super_resolution import (RGB_MEAN, SKIMAGE_SPLITS, BicubicUpsampler, PatchSource, SuperResolutionConfig,
                                    SuperResolutionTask, imresize, load_rgb, prepare_images, psnr, read_image_folder,
                                    resize_matrix, rgb_to_y, shave, ssim)


# ---------------------------------------------------------------------------------------------------- imresize
def test_imresize_matches_matlab_without_antialiasing():
    # Octave / MATLAB: imresize(reshape(0:15, 4, 4)', 0.5, 'bicubic', 'AntiAliasing', false)
    image = np.arange(16, dtype=np.float64).reshape(4, 4)
    expected = [[2.1875, 4.3125], [10.6875, 12.8125]]
    np.testing.assert_allclose(imresize(image, 0.5, antialias=False), expected, atol=1e-12)


def test_imresize_downscale_with_antialiasing_by_hand():
    # MATLAB imresize([1 2 3 4], 0.5) = [1.4609 3.5391]. By hand: the kernel is stretched to width 8,
    # taps at distances 0.5, 1.5, 2.5, 3.5 weigh cubic(0.25) = 0.8671875, cubic(0.75) = 0.2265625,
    # cubic(1.25) = -0.0703125, cubic(1.75) = -0.0234375 (each side, normalised by their sum 2), and the taps
    # left of pixel 1 mirror onto pixels 1, 2, 3.
    w = np.array([-0.0234375, -0.0703125, 0.2265625, 0.8671875]) / 2
    first = w @ [3, 2, 1, 1] + w[::-1] @ [2, 3, 4, 4]
    assert first == pytest.approx(1.4609375, abs=1e-12)
    out = imresize(np.array([[1.0, 2.0, 3.0, 4.0]]), 0.5)
    np.testing.assert_allclose(out, [[1.4609375, 3.5390625]], atol=1e-12)


def test_imresize_upscale_by_hand():
    # x2: output pixel 1 samples u = 0.75; taps at pixels 0 (-> mirrored 1), -1 (-> 2), 1, 2 with weights
    # cubic(0.75), cubic(1.75), cubic(0.25), cubic(1.25)
    expected_first = 0.2265625 * 1 - 0.0234375 * 2 + 0.8671875 * 1 - 0.0703125 * 2
    out = imresize(np.array([[1.0, 2.0, 3.0, 4.0]] * 2), 2)
    assert out.shape == (4, 8)
    assert out[0, 0] == pytest.approx(expected_first, abs=1e-12) == pytest.approx(0.90625)
    np.testing.assert_allclose(out[0], 5 - out[0, ::-1], atol=1e-12)  # the ramp's mirror symmetry


def test_imresize_keeps_constants_and_rounds_uint8():
    flat = np.full((9, 13, 3), 77, dtype=np.uint8)
    small = imresize(flat, 1 / 3)
    assert small.dtype == np.uint8 and small.shape == (3, 5, 3) and (small == 77).all()
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (12, 10, 3)).astype(np.uint8)
    as_uint8 = imresize(image, 0.5).astype(np.float64)
    as_float = imresize(image.astype(np.float64), 0.5)
    assert np.abs(as_uint8 - as_float).max() <= 1.0  # rounded after each axis, never clipped away further


def test_resize_matrix_rows_sum_to_one_and_bicubic_upsampler_matches_imresize():
    for n, m, s in ((7, 14, 2.0), (30, 10, 1 / 3), (5, 20, 4.0)):
        np.testing.assert_allclose(resize_matrix(n, m, s).sum(axis=1), 1.0, atol=1e-12)
    x = torch.randn(2, 3, 5, 7, dtype=torch.float64)
    up = BicubicUpsampler(3)(x)
    assert up.shape == (2, 3, 15, 21)
    for n in range(2):
        for c in range(3):
            np.testing.assert_allclose(up[n, c].numpy(), imresize(x[n, c].numpy(), 3), atol=1e-12)


# ---------------------------------------------------------------------------------------------------- metrics
def test_y_channel_uses_bt601_coefficients():
    rgb = np.array([[[255, 0, 0], [0, 255, 0], [0, 0, 255], [255, 255, 255], [0, 0, 0]]], dtype=np.uint8)
    np.testing.assert_allclose(rgb_to_y(rgb)[0], [16 + 65.481, 16 + 128.553, 16 + 24.966, 235.0, 16.0], atol=1e-9)
    pixel = np.array([[[10, 200, 90]]])
    r, g, b = pixel[0, 0] / 255
    assert rgb_to_y(pixel)[0, 0] == pytest.approx(16 + 65.481 * r + 128.553 * g + 24.966 * b)
    with pytest.raises(ValueError, match="RGB"):
        rgb_to_y(np.zeros((4, 4)))


@pytest.mark.parametrize("k", [1, 3, 10])
def test_psnr_of_a_constant_offset(k):
    a = np.random.default_rng(k).uniform(20, 200, (16, 16))
    assert psnr(a, a + k) == pytest.approx(20 * np.log10(255 / k), abs=1e-9)
    assert psnr(a, a - k) == pytest.approx(20 * np.log10(255 / k), abs=1e-9)


def test_identical_images_give_infinite_psnr_and_unit_ssim():
    a = np.random.default_rng(0).uniform(0, 255, (32, 32))
    assert psnr(a, a) == float("inf")
    assert ssim(a, a) == pytest.approx(1.0)
    assert ssim(a, 255 - a) < 0  # anti-correlated structure
    with pytest.raises(ValueError, match="shapes"):
        psnr(a, a[1:])


def test_ssim_by_hand_for_constant_images():
    # constant images: variances and covariance vanish, SSIM = (2 mu_x mu_y + C1) / (mu_x^2 + mu_y^2 + C1)
    c1 = (0.01 * 255) ** 2
    x, y = np.full((24, 24), 100.0), np.full((24, 24), 120.0)
    assert ssim(x, y) == pytest.approx((2 * 100 * 120 + c1) / (100 ** 2 + 120 ** 2 + c1), rel=1e-9)


def test_shave():
    a = np.arange(100).reshape(10, 10)
    assert shave(a, 2).shape == (6, 6) and shave(a, 2)[0, 0] == 22
    assert shave(a, 0) is a


# ---------------------------------------------------------------------------------------------------- images
def _write(folder, name, array):
    folder.mkdir(parents=True, exist_ok=True)
    io.imsave(str(folder / name), array, check_contrast=False)


def test_load_rgb_converts_gray_alpha_and_16_bit(tmp_path):
    rng = np.random.default_rng(0)
    gray = rng.integers(0, 256, (9, 7)).astype(np.uint8)
    _write(tmp_path, "gray.png", gray)
    _write(tmp_path, "rgba.png", rng.integers(0, 256, (9, 7, 4)).astype(np.uint8))
    _write(tmp_path, "deep.png", (gray.astype(np.uint16) * 257))
    loaded = load_rgb(tmp_path / "gray.png")
    assert loaded.shape == (9, 7, 3) and loaded.dtype == np.uint8 and (loaded == gray[:, :, None]).all()
    assert load_rgb(tmp_path / "rgba.png").shape == (9, 7, 3)
    assert (load_rgb(tmp_path / "deep.png") == gray[:, :, None]).all()
    (tmp_path / "broken.png").write_bytes(b"not a png")
    with pytest.raises(DataError, match="broken.png"):
        load_rgb(tmp_path / "broken.png")


def test_folder_reader_sorts_images_and_rejects_empty_or_missing(tmp_path):
    _write(tmp_path / "a", "b.png", np.zeros((8, 8, 3), np.uint8))
    _write(tmp_path / "a", "a.jpg", np.zeros((8, 8, 3), np.uint8))
    (tmp_path / "a" / "notes.txt").write_text("x")
    assert [p.name for p in read_image_folder(tmp_path / "a")] == ["a.jpg", "b.png"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="holds no images"):
        read_image_folder(tmp_path / "empty")
    with pytest.raises(DataError, match="does not exist"):
        read_image_folder(tmp_path / "missing")


def test_odd_sizes_are_mod_cropped_and_small_images_skipped(tmp_path, caplog):
    rng = np.random.default_rng(1)
    _write(tmp_path, "odd.png", rng.integers(0, 256, (41, 37, 3)).astype(np.uint8))
    _write(tmp_path, "tiny.png", rng.integers(0, 256, (10, 40, 3)).astype(np.uint8))
    with caplog.at_level(logging.WARNING):
        images = prepare_images(sorted(tmp_path.iterdir()), scale=3, min_lr_side=4, purpose="train")
    assert [im.name for im in images] == ["odd"]
    assert images[0].hr.shape == (39, 36, 3) and images[0].lr.shape == (13, 12, 3)
    assert "skipping tiny.png" in caplog.text
    with pytest.raises(DataError, match="no usable image"):
        prepare_images([tmp_path / "tiny.png"], scale=3, min_lr_side=4, purpose="train")


def test_patches_are_aligned_seeded_and_augmented():
    rng = np.random.default_rng(2)
    hr = rng.integers(0, 256, (40, 60, 3)).astype(np.uint8)
    from tasks.super_resolution import SrImage

    source = PatchSource([SrImage("x", hr, imresize(hr, 0.5))], scale=2, patch_size=6, patches_per_epoch=64)
    lr, hr_batch = source.get_batch(np.arange(64), seed=5)
    assert lr.shape == (64, 3, 6, 6) and hr_batch.shape == (64, 3, 12, 12)
    lr2, _ = source.get_batch(np.arange(64), seed=5)
    assert torch.equal(lr, lr2)
    assert not torch.equal(lr, source.get_batch(np.arange(64), seed=6)[0])
    # each LR patch is the downscaled HR patch's counterpart: compare with the HR patch box-averaged
    pooled = torch.nn.functional.avg_pool2d(hr_batch, 2)
    assert (lr - pooled).abs().mean() < 0.05
    mean = torch.tensor(RGB_MEAN).view(1, 3, 1, 1)
    assert float((lr + mean).min()) >= 0 and float((lr + mean).max()) <= 1


# ---------------------------------------------------------------------------------------------------- the task
@pytest.fixture(scope="module")
def skimage_task():
    return SuperResolutionTask(SuperResolutionConfig(val_crop=64), seed=0)


def test_skimage_split_is_disjoint_and_bicubic_is_scored(skimage_task):
    names = [n for split in SKIMAGE_SPLITS.values() for n in split]
    assert len(names) == len(set(names))
    task = skimage_task
    assert task.metric == "psnr" and task.num_outputs == 3 and task.input_shape == (3, 360, 640)
    assert all(im.hr.shape == (64, 64, 3) and im.lr.shape == (32, 32, 3) for im in task.val)
    # the val crops are crops of the LR image of the whole photo (not downscaled crops)
    whole = prepare_images([task._paths(task.config)["val"][0]], 2, 1, "val")[0]
    y, x = (whole.hr.shape[0] - 64) // 4 * 2, (whole.hr.shape[1] - 64) // 4 * 2
    assert (task.val[0].hr == whole.hr[y:y + 64, x:x + 64]).all()
    assert (task.val[0].lr == whole.lr[y // 2:y // 2 + 32, x // 2:x // 2 + 32]).all()
    assert [im.hr.shape for im in task.test] == [(512, 512, 3), (426, 640, 3)]  # test images whole, mod-cropped
    scores = task.scores(task.bicubic_model(), "test")
    assert 20 < scores["psnr"] < 45 and 0.5 < scores["ssim"] < 1
    assert task.evaluate(task.bicubic_model(), "test") == pytest.approx(scores["psnr"])
    assert list(task.calibration_batches()) == []
    assert task.preprocessing()["mean"] == list(RGB_MEAN)


class _Oracle(torch.nn.Module):
    """Returns the HR images of a split in order, mean-shifted like the network outputs."""

    def __init__(self, images):
        super().__init__()
        self.outputs = [torch.from_numpy(im.hr).permute(2, 0, 1)[None].float() / 255
                        - torch.tensor(RGB_MEAN).view(1, 3, 1, 1) for im in images]

    def forward(self, x):
        return self.outputs.pop(0)


def test_a_perfect_network_scores_infinite_psnr_and_unit_ssim(skimage_task):
    task = skimage_task
    scores = task.scores(_Oracle(task.val), "val")
    assert scores == {"psnr": float("inf"), "ssim": pytest.approx(1.0)}


def test_folders_dataset_reads_train_val_test_and_checks_scale(tmp_path):
    rng = np.random.default_rng(3)
    for split, n in (("train", 3), ("val", 2), ("test", 1)):
        for i in range(n):
            _write(tmp_path / split, f"{i}.png", rng.integers(0, 256, (50 + i, 47, 3)).astype(np.uint8))
    _write(tmp_path / "test", "gray.png", rng.integers(0, 256, (33, 35)).astype(np.uint8))
    config = SuperResolutionConfig(dataset="folders", root=str(tmp_path), train_dir="train", val_dir="val",
                                   test_dir="test", patch_size=8, batch_size=4, epoch_patches=8)
    task = build_task(config, seed=0)
    assert len(task.train.images) == 3 and len(task.val) == 2 and len(task.test) == 2
    assert all(im.hr.shape[0] % 2 == 0 and im.hr.shape[1] % 2 == 0 for im in task.val + task.test)
    (step, lr, hr), = list(task.train_batches(0))[:1]
    assert lr.shape == (4, 3, 8, 8) and hr.shape == (4, 3, 16, 16)
    with pytest.raises(DataError, match="scale"):
        task.loss(torch.zeros(4, 3, 24, 24), hr)
    with pytest.raises(DataError, match="scale"):
        task.evaluate(torch.nn.Upsample(scale_factor=3), "val")
    assert task.loss(hr, hr).item() == 0


def test_config_errors_name_the_key(tmp_path):
    with pytest.raises(DataError, match="scale"):
        SuperResolutionConfig(scale=5)
    with pytest.raises(DataError, match="train_dir"):
        SuperResolutionConfig(dataset="folders")
    with pytest.raises(DataError, match="deploy_size"):
        SuperResolutionConfig(deploy_size=[360])
    with pytest.raises(DataError, match="does not exist"):
        SuperResolutionTask(SuperResolutionConfig(dataset="folders", root=str(tmp_path), train_dir="a", val_dir="b",
                                                  test_dir="c"), seed=0)
