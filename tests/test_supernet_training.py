"""Supernet training schedules: fractional epochs end inside an epoch, checkpointed, and resume to nothing."""
from __future__ import annotations

import pytest

from conftest import SMOKE, TRAIN_ON_256
from nas.config import load_config
from nas.context import build_task_and_space
from nas.training.supernet_training import SupernetTrainer


def _trainer(tmp_path, epochs: float) -> SupernetTrainer:
    config = load_config(SMOKE, [*TRAIN_ON_256, f"train.epochs={epochs}"])
    task, space = build_task_and_space(config)
    return SupernetTrainer(space, space.build_supernet(), task, config.train, config.seed,
                           tmp_path / "supernet.pt")


def test_a_fractional_epoch_count_ends_inside_the_epoch_and_resumes_to_nothing(tmp_path):
    trainer = _trainer(tmp_path, 1.5)
    assert trainer.steps_per_epoch == 8 and trainer.total_steps == 12
    steps = []
    trainer.train(progress=False, on_step=steps.append)
    assert steps == list(range(1, 13))
    assert trainer.optimizer.param_groups[0]["lr"] < 0.05 * trainer.config.lr  # the cosine ran to its end
    resumed = _trainer(tmp_path, 1.5)
    assert resumed.global_step == 12 and resumed.done
    resumed.train(progress=False, on_step=steps.append)
    assert len(steps) == 12  # nothing repeated


def test_the_epoch_count_must_be_positive():
    with pytest.raises(Exception, match="epochs: must be > 0"):
        load_config(SMOKE, ["train.epochs=0"])
