"""Every registered task implements the `Task` protocol that training, evaluation, baselines and export use."""
import pytest

from conftest import CONFIGS
from nas.config import load_config
from tasks import TASKS, Task, TaskConfig, build_task

#: a small config of each registered task
TASK_CONFIGS = {"classification": CONFIGS / "fmnist_mobilenet_smoke.yaml",
                "super_resolution": CONFIGS / "sr_edsr_x2_smoke.yaml"}


def test_every_registered_task_has_a_config_here():
    assert set(TASK_CONFIGS) == set(TASKS)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_the_task_implements_the_protocol(name):
    config = load_config(TASK_CONFIGS[name], ["task.train_size=64", "task.calib_images=8"] if name ==
                         "classification" else [])
    assert isinstance(config.task, TaskConfig) and config.task.type == name
    task = build_task(config.task, seed=0)
    assert isinstance(task, Task)
    classifies = name == "classification"
    assert (task.num_classes >= 1) == classifies and (task.scale is None) == classifies
    assert len(task.test) > 0 and task.train_batches.steps_per_epoch() >= 1
    assert tuple(task.input_shape) and task.num_outputs >= 1


def test_scores_lead_with_the_metric():
    """`scores` reports the search's metric first, as `evaluate` computes it (super-resolution adds SSIM)."""
    import torch.nn as nn

    from tasks.super_resolution import BicubicUpsampler

    config = load_config(TASK_CONFIGS["super_resolution"])
    task = build_task(config.task, seed=0)
    model = BicubicUpsampler(task.scale)
    scores = task.scores(model, "test")
    assert list(scores) == ["psnr", "ssim"] and scores["psnr"] == task.evaluate(model, "test")
    config = load_config(TASK_CONFIGS["classification"], ["task.train_size=64", "task.test_images=50"])
    task = build_task(config.task, seed=0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, task.num_classes))
    assert task.scores(net, "test") == {"top1": task.evaluate(net, "test")}
