"""What every training loop of vpunas does around its steps: supernet training, finalisation, and the
differentiable search with its fine-tuning each run their own steps inside one `TrainingSession`.

The session defers SIGINT / SIGTERM to the end of a step (`nas.runtime.StopRequests`), adapts the thread count
to a shared machine (`nas.runtime.ThreadGovernor`), shows progress, checkpoints every `checkpoint_every` steps
and wherever the loop asks (an epoch's end, the last step), and logs how many steps the session trained however
it ends, so that the sessions of a resumed run add up to the total when no step was repeated.

    with TrainingSession(trainer, "supernet training", checkpoint_every=50, progress=True) as session:
        for ...:
            with session.timed_step():
                loss = trainer.train_step(...)
            trainer.global_step += 1
            session.step_done(checkpoint=last_of_epoch, loss=f"{loss:.3f}")
"""
from __future__ import annotations

import logging
from contextlib import ExitStack
from typing import Callable, ContextManager, Optional

from ..runtime import StopRequests, ThreadGovernor

logger = logging.getLogger(__name__)

__all__ = ["TrainingSession"]


class TrainingSession:
    """The frame of one training loop's session.

    Args:
        trainer: the loop's state: `global_step`, `total_steps` and `save()` (its checkpoint).
        label: names the loop in the log ("<label>: N steps in this session, at step S of T").
        checkpoint_every: a checkpoint after every this many steps (`trainer.global_step` a multiple of it).
        progress: show a progress bar (`progress_total` steps, `progress_label` before it).
        set_threads: how the governor changes the loop's threads (default: torch's thread count).
        adapt_threads: let the governor change them at all (the run's `adapt_threads`).
        sync_stop: makes a stop request every process's (distributed training: all stop after the same step).
        on_step: runs after each finished step (and its checkpoint) with `trainer.global_step`.
    """

    def __init__(self, trainer, label: str, *, checkpoint_every: int, progress: bool = True,
                 progress_label: Optional[str] = None, progress_total: Optional[int] = None,
                 set_threads: Optional[Callable[[int], None]] = None, adapt_threads: bool = True,
                 sync_stop: Optional[Callable[[bool], bool]] = None,
                 on_step: Optional[Callable[[int], None]] = None):
        self.trainer, self.label, self.checkpoint_every = trainer, label, checkpoint_every
        self._progress = progress
        self._progress_label = progress_label or label
        self._progress_total = progress_total if progress_total is not None else trainer.total_steps
        self._set_threads, self._adapt_threads = set_threads, adapt_threads
        self._sync_stop, self._on_step = sync_stop, on_step
        self._stack = ExitStack()
        self.first_step = trainer.global_step

    def __enter__(self) -> "TrainingSession":
        from tqdm import tqdm

        self.bar = tqdm(total=self._progress_total, initial=self.trainer.global_step, desc=self._progress_label,
                        unit="step", disable=not self._progress, dynamic_ncols=True)
        self._stack.callback(self.bar.close)
        self.stop = self._stack.enter_context(StopRequests())
        self._stack.callback(self._log_steps)
        self.governor = self._stack.enter_context(ThreadGovernor(set_threads=self._set_threads,
                                                                       enabled=self._adapt_threads))
        return self

    def __exit__(self, *exc) -> None:
        self._stack.__exit__(*exc)

    def _log_steps(self) -> None:
        logger.info("%s: %d steps in this session, at step %d of %d", self.label,
                    self.trainer.global_step - self.first_step, self.trainer.global_step, self.trainer.total_steps)

    def timed_step(self) -> ContextManager[None]:
        """Time the enclosed step for the thread governor."""
        return self.governor.timed_step()

    def new_phase(self) -> None:
        """The steps change in kind from here on: the governor measures their pace anew."""
        self.governor.new_phase()

    def set_total(self, total: int) -> None:
        """The loop ends at step `total` now (a shortened schedule): the progress bar's end."""
        self.bar.total = total
        self.bar.refresh()

    def step_done(self, checkpoint: bool = False, **postfix) -> None:
        """After a finished step: progress, the checkpoint when due (or `checkpoint`), then a requested stop
        (checkpointed; KeyboardInterrupt), then `on_step`."""
        self.bar.update(1)
        self.bar.set_postfix(**postfix)
        if checkpoint or self.trainer.global_step % self.checkpoint_every == 0:
            self.trainer.save()
        if self._sync_stop is not None:
            self.stop.requested = self._sync_stop(self.stop.requested)
        self.stop.check(self.trainer.save)
        if self._on_step is not None:
            self._on_step(self.trainer.global_step)
