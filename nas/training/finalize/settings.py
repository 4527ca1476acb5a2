"""`FinalizeConfig`: the settings of finalisation (`search.finalize` in a config file)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ...errors import check_bounds

INITS = ("inherited", "scratch")


@dataclass
class FinalizeConfig:
    """Args:
        archs: archs to finalise, spread over the front's latency range (0 = no finalisation; see
            `select_spread`).
        screen_archs: archs trained for the first `screen_epochs` before `archs` of them are chosen to continue,
            by their val metric then (0, or not more than `archs` = no screening).
        screen_epochs: how far into the schedule the screening trains (below `epochs`).
        init: "inherited" (fine-tune the supernet's weights) or "scratch" (train from fresh weights).
        epochs: passes over the training split (fractions allowed).
        batch_size: training batch of finalisation (0 = the task's `batch_size`). Larger batches train these
            small nets faster per image on the CPU: fewer steps, so less per-step framework work per image.
        lr: peak learning rate (linear warm-up, cosine to 0); None = the supernet's `train.lr`. Optimizer,
            weight decay and gradient clipping are the supernet's (`train` section).
        warmup_epochs: linear warm-up from 1% of `lr`.
        kd_ratio: weight of the distillation loss from the supernet's largest arch, added to the task loss
            (0 = task loss only, no teacher).
        int8: also score each finalised arch quantized to INT8 (`nas.export.quantize`): `final_int8_test_<metric>`.
        run_budget_minutes: the run's wall time (all its sessions) by which it should have ended, the scoring
            after finalisation and the report included: finalisation then times a few of its training steps and
            plans each arch's epochs to fit what is left (never under half of `epochs`, see `budgeted_epochs`),
            then re-plans from the pace of its steps as it trains (`Replanner`: fewer epochs, never fewer than
            trained, when it runs late); 0 = no budget. Machines differ by several times in speed, and a machine
            by its load; this keeps a run's length, not its recipe.
        max_archs: under a run budget, finalise up to this many archs when what is left fits them at the full
            `epochs` (timed like the epochs; the first `archs` of them are the archs chosen without the extra
            places); 0 = `archs` exactly. A faster machine so hands over a denser front instead of idle minutes.
        max_epochs: under a run budget, an arch trains for up to this many epochs (0 = `epochs` at most): the
            budget's time is split among the archs by their step times, so cheap archs train longer than costly
            ones (`budgeted_epochs`), and with time to spare all of them train up to `max_epochs`.
    """

    archs: int = 8
    screen_archs: int = 0
    screen_epochs: float = 0.5
    init: str = "inherited"
    epochs: float = 1.0
    batch_size: int = 0
    lr: Optional[float] = None
    warmup_epochs: float = 0.0
    kd_ratio: float = 1.0
    int8: bool = False
    run_budget_minutes: float = 0.0
    max_archs: int = 0
    max_epochs: float = 0.0

    def __post_init__(self):
        if self.init not in INITS:
            raise ValueError(f"init: {self.init!r} is not one of {', '.join(INITS)}")
        check_bounds(self, non_negative=("archs", "screen_archs", "warmup_epochs", "kd_ratio", "run_budget_minutes"),
                     positive=("epochs",))
        if self.batch_size < 0:
            raise ValueError("batch_size: must be >= 0 (0 = the task's batch_size)")
        if self.screening and not 0 < self.screen_epochs < self.epochs:
            raise ValueError(f"screen_epochs: must be > 0 and below epochs ({self.epochs:g})")
        if self.run_budget_minutes and self.screening:
            raise ValueError("run_budget_minutes: not with screening (screen_archs > archs); set one of them to 0")
        if self.max_archs and self.max_archs < self.archs:
            raise ValueError(f"max_archs: must be 0 or at least archs ({self.archs})")
        if self.max_archs > self.archs and not self.run_budget_minutes:
            raise ValueError("max_archs: sized by the run budget; set run_budget_minutes too")
        if self.max_epochs and self.max_epochs < self.epochs:
            raise ValueError(f"max_epochs: must be 0 or at least epochs ({self.epochs:g})")
        if self.max_epochs > self.epochs and not self.run_budget_minutes:
            raise ValueError("max_epochs: sized by the run budget; set run_budget_minutes too")
        if self.lr is not None and self.lr <= 0:
            raise ValueError("lr: must be > 0 (or null for train.lr)")

    @property
    def screening(self) -> bool:
        return self.screen_archs > self.archs > 0

