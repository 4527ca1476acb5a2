"""Finalisation: selection over the front, the lockstep trainer, the stage end to end with resume and export."""
import copy
import json
import shutil
import time
from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.nn as nn

from conftest import SMOKE, made_up_baseline, made_up_candidate
from nas.cli import main
from nas.records import Candidate, FinalScores
from nas.config import ConfigError, config_to_yaml, load_config
from nas.errors import RunDirError
from nas.reporting.report import headline
from nas.rundir import RunDir, read_csv
from nas.training.finalize import (FinalizationPlan, FinalizeConfig, LockstepTrainer, PlanTiming, Replanner,
                                   budgeted_archs, budgeted_epochs, feasible_records, planned_seconds,
                                   ranking_fidelity, select_spread)
from nas.training.supernet_training import TrainConfig
from search_spaces import arch_key


def _candidate(i, arch, top1=0.0, latency_ms=1.0, **fields):
    return Candidate(arch, arch_key(arch), "top1", top1, latency_ms, "toy", params=0, macs=0, id=i, **fields)


def _records(points):
    return [_candidate(i, {"a": i}, m, l) for i, (m, l) in enumerate(points)]


def test_archs_over_the_search_latency_limit_are_not_finalised():
    records = _records([(80, 1), (82, 2), (90, 30)])
    limited = load_config(SMOKE, ["search.evolution.latency_limit_ms=2"]).search
    assert [c.id for c in feasible_records(records, limited)] == [0, 1]
    assert len(feasible_records(records, load_config(SMOKE).search)) == 3  # no limit
    switched = load_config(SMOKE, ["search.evolution.latency_limit_ms=2", "search.strategy=differentiable"]).search
    # the limit is the evolution's; a differentiable search hands over its derived arch (the last epoch's) alone
    assert [c.id for c in feasible_records(records, switched)] == [2]
    every = load_config(SMOKE, ["search.strategy=differentiable", "search.differentiable.finalize_every_epoch=true"])
    assert len(feasible_records(records, every.search)) == 3


def test_selection_keeps_the_ends_of_the_front_and_fills_the_widest_gap():
    # front: latencies 1, 2, 3.5, 4, 8, 16; (70, 20) is slower than the front and worse than its best
    points = [(80, 1), (82, 2), (84, 4), (86, 8), (88, 16), (83.9, 3.5), (70, 20)]
    latencies = lambda n: [c.latency_ms for c in select_spread(_records(points), n)]
    assert latencies(2) == [1, 16]  # the cheapest and the best arch of the front
    # [1, 16] -> the best arch in its middle half on a log scale ([2, 8]): 8; then [1, 8] -> 4; then [1, 4] -> 2
    assert latencies(3) == [1, 8, 16]
    assert latencies(4) == [1, 4, 8, 16]
    assert latencies(5) == [1, 2, 4, 8, 16]


def test_selection_fills_a_gap_of_the_front_from_behind_it():
    # the front jumps from 1 to 16; archs behind it cover the gap
    points = [(80, 1), (88, 16), (79, 2.5), (79.5, 5), (78, 9), (60, 30)]
    chosen = select_spread(_records(points), 4)
    assert [c.latency_ms for c in chosen] == [1, 2.5, 5, 16]


def test_selection_fills_empty_gaps_and_skips_duplicates():
    points = [(80, 1), (88, 16), (79, 2), (85, 17), (60, 30)]
    records = _records(points) + [replace(_records(points)[0], id=9)]  # the same arch again (e.g. DNAS epochs)
    chosen = select_spread(records, 4)
    assert len({json.dumps(c.arch) for c in chosen}) == 4
    # ends 1 and 16, then 2 inside [1, 16]; no arch is left inside [1, 2] or [2, 16]: the last place goes to the
    # next non-dominated layer (17)
    assert sorted(c.latency_ms for c in chosen) == [1, 2, 16, 17]
    assert select_spread(records, 0) == []
    assert len(select_spread(records, 50)) == 5
    # a front of one arch, the cheapest and the best at once: chosen once, the other place from behind the front
    alone = select_spread(_records([(90, 1), (80, 2), (70, 3)]), 2)
    assert [c.latency_ms for c in alone] == [1, 2]


def test_selection_spreads_costs_that_rise_together():
    # MACs follow latency (slightly off, so that the two fronts differ): the places spread over one range
    # instead of each cost picking archs at the same levels
    latencies = [1, 1.5, 2, 3, 4, 6, 8, 12, 16]
    records = [replace(c, macs=c.latency_ms * (1.1 if i % 2 else 1.0))
               for i, c in enumerate(_records([(80 + i, lat) for i, lat in enumerate(latencies)]))]
    chosen = select_spread(records, 4, costs=("latency_ms", "macs"))
    assert [c.latency_ms for c in chosen] == [1, 4, 8, 16]


def test_selection_shares_its_places_among_the_costs():
    # latency and MACs disagree: the fast archs are MAC-heavy, the MAC-light ones slow
    points = [(80, 1, 9), (84, 2, 8), (88, 4, 7), (81, 8, 1), (85, 9, 2), (89, 10, 4), (70, 20, 20)]
    records = [replace(c, macs=m) for c, (_, _, m) in zip(_records([(a, l) for a, l, _ in points]), points)]
    assert [c.id for c in select_spread(records, 2)] == [0, 5]  # the latency front's ends
    both = select_spread(records, 4, costs=("latency_ms", "macs"))
    # the ends of both fronts (0 and 5; 3 and 5), then the widest gap, latency [1, 8]: its best arch, 2
    assert sorted(c.id for c in both) == [0, 2, 3, 5]
    assert len(select_spread(records, 7, costs=("latency_ms", "macs"))) == 7


def test_selection_fills_a_gap_of_one_cost_with_the_cheapest_on_the_others():
    # (top1, latency, MACs): the ends are 0 and 1 on both costs; the widest gap is MACs' [1, 10]. Of the better
    # half there by top-1 (3 and 4), 3 is the faster on latency; 5 is faster still but of the worse half
    points = [(80, 1, 1), (90, 9, 10), (85, 5, 3), (85.5, 3, 3.2), (86, 4.5, 3.1), (70, 2, 3)]
    records = [replace(c, macs=m) for c, (_, _, m) in zip(_records([(a, l) for a, l, _ in points]), points)]
    assert [c.id for c in select_spread(records, 3, costs=("latency_ms", "macs"))] == [0, 3, 1]
    assert [c.id for c in select_spread(records, 3)] == [0, 4, 1]  # one cost: the best in the gap


def test_ranking_fidelity():
    assert ranking_fidelity([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert ranking_fidelity([1, 2, 3, 4], [40, 30, 20, 10]) == pytest.approx(-1.0)
    assert ranking_fidelity([1], [2]) is None


def test_config_is_validated(tmp_path):
    with pytest.raises(ConfigError, match="init"):
        load_config(SMOKE, ["search.finalize.init=pretrained"])
    with pytest.raises(ConfigError, match="epochs"):
        load_config(SMOKE, ["search.finalize.epochs=0"])
    assert load_config(SMOKE, ["search.strategy=differentiable", "search.finalize.archs=2"]).search.finalize.archs == 2
    with pytest.raises(ConfigError, match="kd_ratio"):
        load_config(SMOKE, ["search.finalize.kd_ratio=-1"])
    with pytest.raises(ConfigError, match="screen_epochs"):
        load_config(SMOKE, ["search.finalize.screen_archs=6", "search.finalize.screen_epochs=1"])  # = epochs
    with pytest.raises(ConfigError, match="batch_size: must be >= 0"):
        load_config(SMOKE, ["search.finalize.batch_size=-1"])
    with pytest.raises(ConfigError, match="run_budget_minutes: must be >= 0"):
        load_config(SMOKE, ["search.finalize.run_budget_minutes=-1"])
    with pytest.raises(ConfigError, match="run_budget_minutes: not with screening"):
        load_config(SMOKE, ["search.finalize.run_budget_minutes=20"])  # the smoke config screens
    with pytest.raises(ConfigError, match="max_archs: must be 0 or at least archs"):
        load_config(SMOKE, ["search.finalize.max_archs=2"])
    with pytest.raises(ConfigError, match="max_archs: sized by the run budget"):
        load_config(SMOKE, ["search.finalize.max_archs=5"])
    with pytest.raises(ConfigError, match="max_epochs: must be 0 or at least epochs"):
        load_config(SMOKE, ["search.finalize.max_epochs=0.5"])
    with pytest.raises(ConfigError, match="max_epochs: sized by the run budget"):
        load_config(SMOKE, ["search.finalize.max_epochs=2"])


def test_planned_seconds():
    # two nets of 0.1 and 0.3 s on 2 threads: a step of both takes 0.3 s (the longer net), timed at 0.35 s
    assert planned_seconds([100, 100], [0.1, 0.3], 0.35, 2) == pytest.approx(35)
    assert planned_seconds([100, 300], [0.1, 0.3], 0.35, 2) == pytest.approx(35 + 200 * 0.35)
    assert planned_seconds([300, 100], [0.1, 0.3], 0.35, 2) == pytest.approx(35 + 200 * 0.15)  # 0.05 s beyond work
    # four nets of 0.2 s share 2 threads: 0.4 s a step, 0.2 s once two of them have stopped
    assert planned_seconds([10, 10, 20, 20], [0.2] * 4, 0.4, 2) == pytest.approx(4 + 2)
    assert planned_seconds([10, 10, 20, 20], [0.2] * 4, 0.4, 2, start=15) == pytest.approx(1)  # the last 5 steps


def test_budgeted_epochs():
    # one net, 100 steps an epoch at 0.5 s, 60 s of scoring: 3 epochs need 210 s
    def one_net(seconds_left, max_epochs=0):
        [epochs] = budgeted_epochs(3, max_epochs, seconds_left, 60, 100, 0.5, [0.5], 1)
        return epochs

    assert one_net(1000) == 3
    assert one_net(190) == 2.6  # (190 - 60) / 50 = 2.6
    assert one_net(189) == 2.5  # cut down to tenths
    assert one_net(10) == 1.5  # never under half
    assert one_net(1000, max_epochs=5) == 5  # time to spare: up to max_epochs
    assert one_net(300, max_epochs=5) == 4.8
    assert one_net(190, max_epochs=5) == 2.6  # max_epochs never shortens
    # nets of 0.1 and 0.4 s, one thread: 3 epochs of both need 150 s; the same time trains the cheap one twice as
    # long as the costly one (1/sqrt of their step times): 5 and 2.5 epochs
    costs = dict(scoring_seconds=60, steps_per_epoch=100, step_seconds=0.5, net_seconds=[0.1, 0.4], workers=1)
    assert budgeted_epochs(3, 5, 211, **costs) == [5, 2.5]
    assert budgeted_epochs(3, 0, 210, **costs) == [3, 3]  # at most epochs: all of them fit
    assert budgeted_epochs(3, 0, 180, **costs) == [3, 2.2]  # short of time: the costly one gives up more
    assert budgeted_epochs(3, 5, 1000, **costs) == [5, 5]
    assert budgeted_epochs(3, 5, 10, **costs) == [1.5, 1.5]
    assert budgeted_epochs(3, 5, 1000, 60, 100, 0.001, [0.0, 0.001], 1) == [5, 5]  # a net too quick for the clock


class _Task:
    """Two-class toy data: the sign of the first input feature."""

    def __init__(self):
        from tasks.data import EpochBatches, TensorImages

        rng = np.random.default_rng(0)
        images = rng.integers(0, 256, size=(256, 1, 4, 4), dtype=np.uint8)
        labels = (images[:, 0, 0, 0] > 127).astype(np.int64)
        self.train_batches = EpochBatches(TensorImages(images, labels, 2, (0.5,), (0.25,)), 32, 0)

    def loss(self, out, y):
        return nn.functional.cross_entropy(out, y)

    def distill_loss(self, out, teacher):
        return (out - teacher).pow(2).mean()


def _nets():
    torch.manual_seed(0)
    return [nn.Sequential(nn.Flatten(), nn.Linear(16, 2)) for _ in range(2)]


def _train_killed_at_call(trainer: LockstepTrainer, n: int) -> None:
    """Train until the `n`-th training step is asked for, then stop as a kill would."""
    original, calls = trainer.train_step, []

    def killed(x, y):
        calls.append(1)
        if len(calls) == n:
            raise KeyboardInterrupt
        return original(x, y)

    trainer.train_step = killed
    with pytest.raises(KeyboardInterrupt):
        trainer.train(progress=False)


@pytest.mark.parametrize("kd_ratio", [0.0, 1.0])
def test_nets_trained_side_by_side_match_one_thread_and_keep_their_dropouts(tmp_path, kd_ratio):
    """On 2 threads the nets train at once, one thread each, their dropouts seeded per net and step (and the
    teacher's forward beside them): the weights equal a 1-thread run's bit for bit, and the nets get their plain
    `nn.Dropout` back."""
    def trained(threads: int, name: str) -> list[torch.Tensor]:
        torch.manual_seed(0)
        net = nn.Sequential(nn.Flatten(), nn.Dropout(0.5), nn.Linear(16, 2))
        nets = [copy.deepcopy(net) for _ in range(3)]  # alike but for their dropout masks
        teacher = nn.Sequential(nn.Flatten(), nn.Linear(16, 2)).eval() if kd_ratio else None
        train = TrainConfig(opt="adamw", lr=0.05, weight_decay=0.0, channels_last=False)
        trainer = LockstepTrainer(nets, teacher, _Task(), train, FinalizeConfig(epochs=1, kd_ratio=kd_ratio), 0,
                                  tmp_path / name, list("abc"))
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            trainer.train(progress=False)
            assert torch.get_num_threads() == threads  # restored after training
        finally:
            torch.set_num_threads(before)
        assert all(type(net[1]) is nn.Dropout for net in trainer.nets)
        return [net[2].weight.detach().clone() for net in trainer.nets]

    one, two = trained(1, "one.pt"), trained(2, "two.pt")
    assert all(torch.equal(a, b) for a, b in zip(one, two))
    assert not torch.equal(one[0], one[1])  # each net its own masks (same weights, same batches)


def _lr_at(trainer: LockstepTrainer, step: int, net: int = 0) -> float:
    """The learning rate net `net`'s schedule gives at `step` (timm's scheduler, stepped per update)."""
    trainer.schedulers[net].step_update(step)
    return trainer.optimizers[net].param_groups[0]["lr"]


def test_lockstep_training_learns_and_resumes_bit_for_bit(tmp_path):
    task, train = _Task(), TrainConfig(opt="adamw", lr=0.05, weight_decay=0.0, channels_last=False,
                                       checkpoint_every=3)
    config = FinalizeConfig(epochs=2, warmup_epochs=1, kd_ratio=0.0)
    whole = LockstepTrainer(_nets(), None, task, train, config, 0, tmp_path / "a.pt", ["x", "y"])
    assert whole.total_steps == 16 and _lr_at(whole, 0) == pytest.approx(0.0005)  # warm-up from 1% of the peak
    assert _lr_at(whole, 4) == pytest.approx(0.0005 + 0.5 * 0.0495) and _lr_at(whole, 8) == pytest.approx(0.05)
    assert _lr_at(whole, 12) == pytest.approx(0.025) and _lr_at(whole, 16) == pytest.approx(0.0)  # cosine to 0
    before = [net[1].weight.detach().clone() for net in whole.nets]
    whole.train(progress=False)
    assert all(not torch.equal(b, net[1].weight) for b, net in zip(before, whole.nets))

    _train_killed_at_call(LockstepTrainer(_nets(), None, task, train, config, 0, tmp_path / "b.pt", ["x", "y"]), 8)
    resumed = LockstepTrainer(_nets(), None, task, train, config, 0, tmp_path / "b.pt", ["x", "y"])
    assert resumed.global_step == 6  # the last checkpoint (every 3 steps)
    resumed.train(progress=False)
    for a, b in zip(whole.nets, resumed.nets):
        assert torch.equal(a[1].weight, b[1].weight)
    with pytest.raises(RunDirError, match="other archs"):
        LockstepTrainer(_nets(), None, task, train, config, 0, tmp_path / "b.pt", ["x", "z"])


def test_finalisation_batch_size_of_its_own(tmp_path):
    task, train = _Task(), TrainConfig(opt="adamw", lr=0.05, weight_decay=0.0, channels_last=False)
    own = LockstepTrainer(_nets(), None, task, train, FinalizeConfig(epochs=2, batch_size=64, kd_ratio=0.0), 0,
                          tmp_path / "a.pt", ["x", "y"])
    assert own.steps_per_epoch == 4 and own.total_steps == 8  # 256 images, half the steps of the task's 32
    assert [len(y) for _, _, y in own.batches(1, 0)] == [64] * 4
    assert own.batches.seed == task.train_batches.seed  # same shuffles, other cuts
    same = LockstepTrainer(_nets(), None, task, train, FinalizeConfig(epochs=2, batch_size=32, kd_ratio=0.0), 0,
                           tmp_path / "b.pt", ["x", "y"])
    assert same.batches is task.train_batches and same.total_steps == 16
    with pytest.raises(ConfigError, match="batch_size: 512 is more than the 256 training samples"):
        LockstepTrainer(_nets(), None, task, train, FinalizeConfig(batch_size=512), 0, tmp_path / "c.pt", ["x", "y"])


def test_shortened_schedule_is_kept_on_resume(tmp_path):
    """A schedule planned shorter than configured (a run budget) equals one configured that long, and a trainer
    resumed without the plan (a checkpoint from before plans were kept) follows its checkpoint's; timing steps on
    copies leaves the nets as they were."""
    task, train = _Task(), TrainConfig(opt="adamw", lr=0.05, weight_decay=0.0, channels_last=False,
                                       checkpoint_every=3)
    short = LockstepTrainer(_nets(), None, task, train, FinalizeConfig(epochs=1, kd_ratio=0.0), 0,
                            tmp_path / "short.pt", ["x", "y"])
    short.train(progress=False)
    config = FinalizeConfig(epochs=2, kd_ratio=0.0)
    shortened = LockstepTrainer(_nets(), None, task, train, config, 0, tmp_path / "b.pt", ["x", "y"], epochs=[1, 1])
    assert shortened.total_steps == shortened.stop_step == 8
    before = [net[1].weight.detach().clone() for net in shortened.nets]
    step_seconds, net_seconds = shortened.time_steps(steps=2)
    assert step_seconds > 0 and len(net_seconds) == 2 and 0 < max(net_seconds) <= step_seconds
    assert all(torch.equal(b, net[1].weight) for b, net in zip(before, shortened.nets))
    shortened.save()
    _train_killed_at_call(shortened, 5)
    resumed = LockstepTrainer(_nets(), None, task, train, config, 0, tmp_path / "b.pt", ["x", "y"])
    assert (resumed.global_step, resumed.total_steps) == (3, 8)
    resumed.train(progress=False)
    assert resumed.global_step == 8
    for a, b in zip(short.nets, resumed.nets):
        assert torch.equal(a[1].weight, b[1].weight)
    with pytest.raises(RuntimeError, match="started"):
        resumed.continue_from(tmp_path / "short.pt")


class _GetsBusy(nn.Module):
    """Passes its input on, taking `seconds` a training forward, five times that from its `after`-th on: the
    machine got busy with other work."""

    def __init__(self, seconds: float, after: int):
        super().__init__()
        self.seconds, self.after, self.forwards = seconds, after, 0

    def forward(self, x):
        if self.training:
            self.forwards += 1
            time.sleep(self.seconds * (5 if self.forwards >= self.after else 1))
        return x


def test_training_slowed_mid_run_is_replanned_to_end_within_the_budget(tmp_path):
    """Timed at its start, a 4-epoch training has half a second to spare; after 2 epochs its steps slow down
    fivefold. The replanner shortens both schedules (never under the steps they trained), the training ends
    before the deadline minus the scoring's share, the checkpoint holds the new schedules before they are recorded,
    and a trainer resumed from it with the original plan keeps them."""
    task, train = _Task(), TrainConfig(opt="adamw", lr=0.05, weight_decay=0.0, channels_last=False)
    config = FinalizeConfig(epochs=4, kd_ratio=0.0)

    def nets():
        torch.manual_seed(0)
        return [nn.Sequential(_GetsBusy(0.01, after=17), nn.Flatten(), nn.Linear(16, 2)) for _ in range(2)]

    trainer = LockstepTrainer(nets(), None, task, train, config, 0, tmp_path / "f.pt", ["x", "y"])
    assert trainer.net_steps == [32, 32]
    step_seconds, net_seconds = trainer.time_steps(steps=4)  # on copies: their forwards do not count
    timing = PlanTiming(step_seconds, net_seconds, trainer.threads.nets_at_once(), scoring_seconds=0.02,
                        after_seconds=0.0)
    ends_at = time.perf_counter() + timing.training_seconds(trainer.net_steps) + 0.5
    records = []

    def record(net_steps):
        assert torch.load(tmp_path / "f.pt")["net_steps"] == net_steps  # checkpointed first
        records.append((trainer.global_step, net_steps))

    trainer.train(progress=False, replanner=Replanner(timing, ends_at, every=1, record=record))
    ended = time.perf_counter()
    assert ended < ends_at - 0.02  # the scoring's time is left
    assert records and records[-1][1] == trainer.net_steps and trainer.global_step == max(trainer.net_steps) < 32
    assert trainer.global_step > records[0][0]  # shortened, not stopped: it trained on as long as the time allowed
    for (step, _), (_, shorter) in zip(records, records[1:] + [(None, trainer.net_steps)]):
        assert all(step <= steps for steps in shorter)  # never under what they had trained
    resumed = LockstepTrainer(nets(), None, task, train, config, 0, tmp_path / "f.pt", ["x", "y"])
    assert resumed.net_steps == trainer.net_steps and resumed.done


def test_each_net_trains_its_own_schedule(tmp_path):
    """Nets planned for epochs of their own train as if each had its schedule alone (its cosine ends at its
    last step; it trains no further while the others go on), also when killed after the shorter one ended."""
    task, train = _Task(), TrainConfig(opt="adamw", lr=0.05, weight_decay=0.0, channels_last=False,
                                       checkpoint_every=3)

    def trained(epochs: float, name: str) -> LockstepTrainer:
        trainer = LockstepTrainer(_nets(), None, task, train, FinalizeConfig(epochs=epochs, kd_ratio=0.0), 0,
                                  tmp_path / name, ["x", "y"])
        trainer.train(progress=False)
        return trainer

    one, two = trained(1, "one.pt"), trained(2, "two.pt")
    config = FinalizeConfig(epochs=1.5, kd_ratio=0.0)
    mixed = LockstepTrainer(_nets(), None, task, train, config, 0, tmp_path / "mixed.pt", ["x", "y"], epochs=[1, 2])
    assert (mixed.net_steps, mixed.total_steps, mixed.net_epochs) == ([8, 16], 16, [1, 2])
    mixed.save()
    _train_killed_at_call(mixed, 12)
    resumed = LockstepTrainer(_nets(), None, task, train, config, 0, tmp_path / "mixed.pt", ["x", "y"])
    assert (resumed.global_step, resumed.net_steps) == (9, [8, 16])
    resumed.train(progress=False)
    assert torch.equal(resumed.nets[0][1].weight, one.nets[0][1].weight)
    assert torch.equal(resumed.nets[1][1].weight, two.nets[1][1].weight)
    assert not torch.equal(one.nets[0][1].weight, two.nets[0][1].weight)


def test_screened_archs_continue_their_schedule(tmp_path):
    """A screening trainer stops part-way; the archs kept continue its schedule (and resume) to the weights that
    training them from the start would give."""
    task, train = _Task(), TrainConfig(opt="adamw", lr=0.05, weight_decay=0.0, channels_last=False,
                                       checkpoint_every=3)
    config = FinalizeConfig(epochs=2, warmup_epochs=1, kd_ratio=0.0, archs=1, screen_archs=2, screen_epochs=0.5)
    whole = LockstepTrainer(_nets(), None, task, train, config, 0, tmp_path / "whole.pt", ["x", "y"])
    whole.train(progress=False)
    screen = LockstepTrainer(_nets(), None, task, train, config, 0, tmp_path / "screen.pt", ["x", "y"],
                             stop_epochs=0.5)
    screen.train(progress=False)
    assert screen.global_step == 4 and screen.done
    kept = LockstepTrainer(_nets()[1:], None, task, train, config, 0, tmp_path / "kept.pt", ["y"])
    kept.continue_from(tmp_path / "screen.pt")
    assert kept.global_step == 4 and not kept.done and _lr_at(kept, 4) == _lr_at(whole, 4)
    _train_killed_at_call(kept, 6)
    again = LockstepTrainer(_nets()[1:], None, task, train, config, 0, tmp_path / "kept.pt", ["y"])
    assert again.global_step == 9  # the continuation's last checkpoint (every 3 steps), not the screening's
    again.train(progress=False)
    assert again.global_step == 16 and torch.equal(again.nets[0][1].weight, whole.nets[1][1].weight)
    other = LockstepTrainer(_nets()[1:], None, task, train, config, 0, tmp_path / "other.pt", ["z"])
    with pytest.raises(RunDirError, match="does not hold 1 of the archs"):
        other.continue_from(tmp_path / "screen.pt")


def test_headline_against_the_baselines():
    """The finalised archs are what a run hands over: once it has any, archs on inherited weights (id 2) are not
    matched against baselines."""
    rows = [made_up_candidate(1, 2.0, test=80, final_test=85), made_up_candidate(2, 1.0, test=84),
            made_up_candidate(3, 0.5)]
    base = [made_up_baseline("big", 84.5, 4.0), made_up_baseline("small", 83, 1.5), made_up_baseline("huge", 90, 9)]
    assert headline(rows, base, "top1") == [
        "big (84.50 test top1 at 4 ms): arch 1 has 85.00 at 2 ms, 2.00x the fps",
        "small (83.00 test top1 at 1.5 ms): arch 1 has 85.00 at 2 ms, 0.75x the fps",
        "huge (90.00 test top1 at 9 ms): no searched arch reaches it"]


def test_smoke_run_finalises_spread_archs(smoke_run):
    rows = read_csv(smoke_run.candidates)
    final = [r for r in rows if r["final_top1"] != ""]
    config = load_config(smoke_run.config)
    assert len(final) == config.search.finalize.archs == 3
    front = [r for r in rows if r["is_pareto"] == "True"]
    latencies = sorted(float(r["latency_ms"]) for r in final)
    front_latency = [float(r["latency_ms"]) for r in front]
    assert min(front_latency) <= latencies[0] and latencies[-1] == max(front_latency)  # the most accurate arch
    for r in final:
        assert 0 < float(r["final_top1"]) <= 100 and 0 < float(r["final_test_top1"]) <= 100
        assert (smoke_run.checkpoint_dir / "final" / f"arch{r['id']}.pt").exists()
    # the finalised front is the non-dominated set of the finalised archs
    on = {r["id"] for r in final if r["is_final_pareto"] == "True"}
    assert on and all(r["is_final_pareto"] == "False" for r in rows if r["final_top1"] == "")
    page = smoke_run.report_html.read_text()
    assert "Finalised archs" in page and "Ranking fidelity" in page and "Against the baselines" in page


def test_export_uses_the_finalised_weights(smoke_run, tmp_path):
    rows = read_csv(smoke_run.candidates)
    row = next(r for r in rows if r["final_top1"] != "")
    target = tmp_path / "final.onnx"
    assert main(["export", str(smoke_run.path), "--arch", row["id"], "--format", "onnx", "-o", str(target)]) == 0
    info = json.loads(target.with_suffix(".json").read_text())
    assert info["weights"] == "finalised"
    assert info["top1"] == float(row["final_top1"]) and info["test_top1"] == float(row["final_test_top1"])


def test_finalisation_interrupted_resumes_to_the_same_result(smoke_run, tmp_path, monkeypatch, caplog):
    """A copy of the finished run loses its finalisation (screening included; its INT8 scores stay, keyed by arch:
    test_search_e2e.py redoes a lost one), is interrupted after the screening in the middle of the chosen archs'
    training, then resumed."""
    import nas.training.finalize as finalize_module

    run = RunDir(tmp_path / "run")
    shutil.copytree(smoke_run.path, run.path)
    shutil.rmtree(run.checkpoint_dir / "final")
    (run.checkpoint_dir / "finalize_plan.json").unlink()
    (run.checkpoint_dir / "finalize.pt").unlink()
    (run.checkpoint_dir / "finalized.jsonl").unlink()
    (run.checkpoint_dir / "screen.pt").unlink()
    (run.checkpoint_dir / "screened.jsonl").unlink()
    original = finalize_module.LockstepTrainer.train_step
    calls = {"n": 0}

    def killed_at_step_10(self, x, y):  # 5 screening steps, then 4 of the chosen archs
        calls["n"] += 1
        if calls["n"] == 10:
            raise KeyboardInterrupt
        return original(self, x, y)

    monkeypatch.setattr(finalize_module.LockstepTrainer, "train_step", killed_at_step_10)
    assert main(["search", SMOKE, "--out", str(run.path), "--resume", "--no-progress"]) == 130  # interrupted
    assert not (run.checkpoint_dir / "finalized.jsonl").exists()
    assert len((run.checkpoint_dir / "screened.jsonl").read_text().splitlines()) == 5
    plan = FinalizationPlan.load(run.checkpoint_dir, epochs=1.0)
    assert plan.from_screening and plan.epochs == [1, 1, 1] and len(set(plan.keys)) == 3
    monkeypatch.setattr(finalize_module.LockstepTrainer, "train_step", original)
    with caplog.at_level("INFO", logger="nas.training.finalize"):
        assert main(["search", SMOKE, "--out", str(run.path), "--resume", "--no-progress"]) == 0
    assert "resumed finalisation at step 8 of 16" in caplog.text and "screening" not in caplog.text
    assert run.candidates.read_text() == smoke_run.candidates.read_text()


def test_plan_is_kept_and_read_from_checkpoints_older_than_plans(tmp_path):
    """The plan round-trips through its file; a run directory from before plans were kept gives its training
    checkpoint's archs; archs a changed config no longer offers are refused with the reason."""
    assert FinalizationPlan.load(tmp_path, epochs=1.0) is None
    records = [_candidate(i, {"width": w}) for i, w in enumerate((8, 16, 24))]
    keys = [c.key for c in records]
    FinalizationPlan([keys[2], keys[0]], [2.0, 0.5]).save(tmp_path)
    plan = FinalizationPlan.load(tmp_path, epochs=1.0)
    assert plan == FinalizationPlan([keys[2], keys[0]], [2.0, 0.5]) and plan.records(records) == [records[2], records[0]]
    (tmp_path / "finalize_plan.json").unlink()
    torch.save({"names": [keys[1]], "global_step": 3}, tmp_path / "finalize.pt")
    assert FinalizationPlan.load(tmp_path, epochs=1.5) == FinalizationPlan([keys[1]], [1.5])
    with pytest.raises(RunDirError, match="1 of the 1 archs of the run's finalisation plan are no longer"):
        FinalizationPlan.load(tmp_path, epochs=1.5).records(records[:1])


def test_budgeted_archs():
    assert budgeted_archs(8, 16, 1000, 100) == 10
    assert budgeted_archs(8, 9, 1000, 100) == 9  # at most max_archs
    assert budgeted_archs(8, 16, 500, 100) == 8  # never under archs (the epochs shorten instead)


def _unfinalised_copy(smoke_run, path, overrides) -> RunDir:
    """A copy of the finished smoke run without its finalisation, its config.yaml rewritten with `overrides`."""
    run = RunDir(path)
    shutil.copytree(smoke_run.path, run.path)
    shutil.rmtree(run.checkpoint_dir / "final")
    for name in ("finalize_plan.json", "finalize.pt", "finalized.jsonl", "finalized_int8.jsonl", "screen.pt",
                 "screened.jsonl"):
        (run.checkpoint_dir / name).unlink()
    run.config.write_text(config_to_yaml(load_config(run.config, overrides)))
    return run


def test_run_budget_with_time_to_spare_finalises_more_archs(smoke_run, tmp_path, caplog):
    """Resumed under a budget with time to spare, max_archs 4 and max_epochs 1.5, the smoke run finalises 4 archs
    instead of 3, for 1.5 epochs instead of 1, and keeps that plan; resumed once more, it trains nothing again."""
    overrides = ["search.finalize.screen_archs=0", "search.finalize.run_budget_minutes=600",
                 "search.finalize.max_archs=4", "search.finalize.max_epochs=1.5", "search.finalize.int8=false"]
    run = _unfinalised_copy(smoke_run, tmp_path / "run", overrides)
    args = ["search", SMOKE, *overrides, "--out", str(run.path), "--resume", "--no-progress"]
    with caplog.at_level("INFO", logger="nas.training.finalize"):
        assert main(args) == 0
    assert "4 archs, a lockstep step takes" in caplog.text and "-> 1.5 epochs (configured: 1;" in caplog.text
    assert torch.load(run.checkpoint_dir / "finalize.pt")["total_steps"] == 24  # 1.5 times the smoke's 16 steps
    final = {r["id"] for r in read_csv(run.candidates) if r["final_top1"] != ""}
    assert len(final) == 4
    assert {r["final_epochs"] for r in read_csv(run.candidates) if r["id"] in final} == {"1.5"}
    plan = FinalizationPlan.load(run.checkpoint_dir, epochs=1.0)
    assert len(plan.keys) == 4 and plan.epochs == [1.5] * 4 and not plan.from_screening
    caplog.clear()
    with caplog.at_level("INFO", logger="nas.training.finalize"):
        assert main(args) == 0
    assert "run budget" not in caplog.text and "finalised 4 archs" in caplog.text
    assert {r["id"] for r in read_csv(run.candidates) if r["final_top1"] != ""} == final


def test_run_budget_shortens_the_finalisation(smoke_run, tmp_path, caplog):
    """A copy of the finished run, its finalisation removed, resumed under a budget it has already spent: the
    finalisation times its steps and plans half its epochs (the plan's floor); its first step finds the run late,
    so the re-planning stops the training there (recorded in the plan), and every arch is still scored. Resumed
    after a kill that left the re-plan unrecorded, it records it and trains nothing again."""
    overrides = ["search.finalize.screen_archs=0", "search.finalize.run_budget_minutes=0.01",
                 "search.finalize.int8=false"]
    run = _unfinalised_copy(smoke_run, tmp_path / "run", overrides)
    with caplog.at_level("INFO", logger="nas.training.finalize"):
        assert main(["search", SMOKE, *overrides, "--out", str(run.path), "--resume", "--no-progress"]) == 0
    assert "run budget 0.01 min" in caplog.text and "-> 0.5 epochs (configured: 1;" in caplog.text
    assert "late for the run budget at step 1: its nets end at steps [1, 1, 1] instead of [8, 8, 8]" in caplog.text
    state = torch.load(run.checkpoint_dir / "finalize.pt")
    assert state["global_step"] == state["total_steps"] == 1 and state["net_steps"] == [1] * 3
    plan = FinalizationPlan.load(run.checkpoint_dir, epochs=1.0)
    assert plan.epochs == [1 / 16] * 3 and plan.timing is not None and len(plan.timing.net_seconds) == 3
    final = [r for r in read_csv(run.candidates) if r["final_top1"] != ""]
    assert len(final) == 3 and all(0 < float(r["final_test_top1"]) <= 100 for r in final)
    assert all(r["final_epochs"] == "0.06" for r in final)
    # killed after the re-plan's checkpoint, before its record and the scoring: the resumed run records the
    # checkpoint's schedules and trains no step again
    FinalizationPlan(plan.keys, [0.5] * 3, timing=plan.timing).save(run.checkpoint_dir)
    (run.checkpoint_dir / "finalized.jsonl").unlink()
    caplog.clear()
    with caplog.at_level("INFO", logger="nas.training.finalize"):
        assert main(["search", SMOKE, *overrides, "--out", str(run.path), "--resume", "--no-progress"]) == 0
    assert "late for the run budget" not in caplog.text and "finalised 3 archs" in caplog.text
    assert torch.load(run.checkpoint_dir / "finalize.pt")["global_step"] == 1
    assert FinalizationPlan.load(run.checkpoint_dir, epochs=1.0).epochs == [1 / 16] * 3
    assert all(r["final_epochs"] == "0.06" for r in read_csv(run.candidates) if r["final_top1"] != "")


def test_finalisation_never_hands_over_an_arch_worse_than_its_inherited_weights():
    """The better of the trained net and the inherited subnet on the whole val split is kept (and its test scores
    reported)."""
    from nas.records import FinalScores
    from nas.training.finalize import better_of

    class Task:
        metric = "top1"

        def evaluate(self, model, split, all_images=True):
            return model.score[split]

        def scores(self, model, split):
            return {self.metric: self.evaluate(model, split)}

    def net(val, test):
        module = nn.Identity()
        module.score = {"val": val, "test": test}
        return module

    trained, inherited = net(80.0, 79.0), net(85.0, 84.0)
    kept, scores, rejected = better_of(Task(), trained, inherited, epochs=1.234)
    assert kept is inherited and scores == FinalScores(85.0, {"top1": 84.0}, epochs=0) and rejected == 80.0
    kept, scores, rejected = better_of(Task(), net(86.0, 70.0), inherited, epochs=1.234)  # val decides, not test
    assert scores == FinalScores(86.0, {"top1": 70.0}, epochs=1.23) and rejected is None


def test_no_finalised_arch_of_the_smoke_run_scores_below_its_inherited_val(smoke_run):
    rows = [r for r in read_csv(smoke_run.candidates) if r["final_top1"] != ""]
    config = load_config(smoke_run.config)
    assert config.task.eval_images >= config.task.val_size  # inherited top1 is on the whole val split too
    assert rows and all(float(r["final_top1"]) >= float(r["top1"]) for r in rows)
