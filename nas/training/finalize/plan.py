"""The finalisation plan: which archs finalisation trains and for how many epochs each.

It is decided before the first step (selection, the screening's choice, a run budget's fitting) and kept in the
run directory, so that a resumed run trains exactly these archs for exactly these epochs, whatever the selection
would choose now. Under a run budget the epochs may shrink as the training goes (`replan.Replanner`): each such
re-plan is recorded in the same file.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

from search_spaces import arch_key

from ...errors import RunDirError
from ...records import Candidate
from ...rundir import atomic_write_text, load_checkpoint
from .replan import PlanTiming

PLAN_FILE = "finalize_plan.json"
CHECKPOINT_FILE = "finalize.pt"
SCREENING_CHECKPOINT_FILE = "screen.pt"


@dataclass
class FinalizationPlan:
    """Args:
        keys: the archs' keys, in the order they train (by latency).
        epochs: each arch's schedule, in epochs.
        from_screening: the archs continue the screening's training where it stopped (its checkpoint) instead of
            starting afresh.
        timing: a run budget's plan: the step times it was fitted to, for the re-planning as it trains; None =
            no budget (or a plan from before the re-planning: it is not re-planned).
    """

    keys: list[str]
    epochs: list[float]
    from_screening: bool = False
    timing: PlanTiming | None = None

    def __post_init__(self):
        if isinstance(self.timing, dict):  # read back from its file
            self.timing = PlanTiming(**self.timing)
        if len(self.keys) != len(self.epochs):
            raise ValueError(f"FinalizationPlan: {len(self.epochs)} schedules for {len(self.keys)} archs")

    def save(self, checkpoint_dir: Path) -> None:
        atomic_write_text(Path(checkpoint_dir) / PLAN_FILE, json.dumps(asdict(self), indent=1) + "\n")

    @classmethod
    def load(cls, checkpoint_dir: Path, epochs: float) -> FinalizationPlan | None:
        """The run's plan; None before finalisation has one. A run directory from before plans were kept has only
        its training checkpoint: that names the archs and holds their schedule (the trainer reads it), so the plan
        read from it gives every arch the configured `epochs`."""
        path = Path(checkpoint_dir) / PLAN_FILE
        if path.exists():
            return cls(**json.loads(path.read_text()))
        checkpoint = Path(checkpoint_dir) / CHECKPOINT_FILE
        if checkpoint.exists():
            names = load_checkpoint(checkpoint, mmap=True)["names"]
            return cls(list(names), [epochs] * len(names))
        return None

    def reschedule(self, net_steps: Sequence[int], steps_per_epoch: int, checkpoint_dir: Path) -> None:
        """Record the schedules the training follows from now on (a re-plan), in the run directory."""
        self.epochs = [steps / steps_per_epoch for steps in net_steps]
        self.save(checkpoint_dir)

    def records(self, candidates: Sequence[Candidate]) -> list[Candidate]:
        """The planned archs among `candidates`, in the plan's order."""
        by_key = {arch_key(c.arch): c for c in candidates}
        missing = [key for key in self.keys if key not in by_key]
        if missing:
            raise RunDirError(f"{len(missing)} of the {len(self.keys)} archs of the run's finalisation plan are no "
                              "longer among the archs it may finalise (was the config's search section changed?)")
        return [by_key[key] for key in self.keys]


def epochs_text(epochs: Sequence[float]) -> str:
    """A plan's epochs for the log."""
    low, high = min(epochs), max(epochs)
    return f"{low:.3g} epochs" if low == high else f"{low:.3g}-{high:.3g} epochs by arch cost"
