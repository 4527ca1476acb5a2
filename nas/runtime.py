"""Process-wide settings for training and evaluating on the CPU."""
from __future__ import annotations

import ctypes
import ctypes.util
import logging
import math
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator

from .errors import TrainingDiverged

logger = logging.getLogger(__name__)

__all__ = ["keep_freed_memory", "StopRequests", "interrupt_on_stop_signals", "interrupt_received",
           "ignore_stop_signals", "check_finite", "auto_threads", "ThreadGovernor"]

#: glibc mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_ONE_GIB = 1 << 30


def keep_freed_memory() -> bool:
    """Serve large tensors from the heap and keep freed memory for the next batch (glibc `mallopt`).

    glibc maps every allocation above its mmap threshold (32 MiB at most by default) to fresh pages and unmaps
    it on free, so each batch of activations page-faults anew: scoring one subnet of the default config spent
    more time in the kernel zeroing pages than in torch (6.3 s, 3.2 s with this setting, on 2 cores). PyTorch's
    CPU tuning guides swap the allocator (jemalloc, tcmalloc) for the same reason; this needs no extra
    library. Returns whether the setting took (False off glibc).
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        logger.debug("no glibc mallopt: allocator left as it is")
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, _ONE_GIB)) and bool(mallopt(_M_TRIM_THRESHOLD, _ONE_GIB))


def check_finite(losses: list[float], what: str, step: int, lr_setting: str, lr: float, batch: int) -> None:
    """Stop a diverging training before the step's update: weights and checkpoint stay as they were. The error
    names the stage and the settings to look at: `lr_setting` (the config key of the stage's learning rate, now
    `lr`) and the batch of `batch` samples."""
    bad = [loss for loss in losses if not math.isfinite(loss)]
    if bad:
        raise TrainingDiverged(f"{what} diverged at step {step + 1} (loss {bad[0]}): lower {lr_setting} (now {lr:g}), "
                               f"raise the batch (now {batch}: task.batch_size) or set train.grad_clip; nothing of "
                               "that step was applied and finished work is kept")


#: SIGINT / SIGTERM reached this process and asked it to stop (`interrupt_received`)
_interrupt_received = threading.Event()
#: how soon a signal that landed within an import is sent again
_RESEND_AFTER_S = 0.05


def interrupt_received() -> bool:
    """Whether a stop signal reached this process since `interrupt_on_stop_signals()`: the CLI exits 130 even when
    a library swallowed the KeyboardInterrupt on its way up and the work went on."""
    return _interrupt_received.is_set()


def _deferred_within_import(signum: int, frame) -> bool:
    """True when `frame` runs within an import: the signal is then sent again in `_RESEND_AFTER_S`, until the
    import is done. An exception that cuts an import short leaves a half-initialised module behind (torch's: its
    re-import then fails or crashes the interpreter, and the process ended with exit 1 or a segfault instead of
    130); imports are short, so the stop waits for them."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            resend = threading.Timer(_RESEND_AFTER_S, os.kill, (os.getpid(), signum))
            resend.daemon = True
            resend.start()
            return True
        frame = frame.f_back
    return False


def _stop_now() -> None:
    _interrupt_received.set()
    raise KeyboardInterrupt


def _raise_interrupt(signum, frame):
    if not _deferred_within_import(signum, frame):
        _stop_now()


def interrupt_on_stop_signals() -> None:
    """SIGINT (Ctrl-C) and SIGTERM (a scheduler's or a container's stop) end the process as a KeyboardInterrupt,
    so that the CLI reports it in one line and every `finally` runs; never within an import (it waits for the
    import's end). Called first thing by the CLI, which also forgets an earlier call's signal here."""
    _interrupt_received.clear()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, _raise_interrupt)


def ignore_stop_signals() -> None:
    """Ignore SIGINT / SIGTERM for the rest of the process, which has finished its work and only exits.

    The interpreter's teardown (torch, OpenVINO: over a second) runs after Python's handlers are gone, so a stop
    signal there ended a finished run with -15; ignored, the exit status stays the run's own. For the command's
    entry point only: a caller that goes on (a test) keeps its signals."""
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)


class StopRequests:
    """Within a training loop, SIGINT / SIGTERM become a request that the loop honours between two steps.

    A signal that lands in the middle of an optimizer step would leave weights and optimizer state out of step
    with each other, so the checkpoint could only be the previous one and a resumed run would repeat the steps
    since. Deferred, the loop finishes its step, checkpoints, then stops (`check`): a resumed run repeats
    nothing. A second signal stops at once; one after the loop's last `check` stops on leaving the block (the
    loop's work is saved by then). Outside the main thread (no signal handlers there) it does nothing.

        with StopRequests() as stop:
            for ...:
                train_step()
                stop.check(save)
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.requested = False
        self._stopped = False
        self._previous: dict = {}

    def _request(self, signum, frame):
        if not self.requested:
            self.requested = True
            logger.warning("%s received: stopping after the current step", signal.Signals(signum).name)
        elif not _deferred_within_import(signum, frame):
            self._stopped = True
            _stop_now()

    def __enter__(self) -> "StopRequests":
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._request) for s in self.SIGNALS}
        return self

    def __exit__(self, exc_type, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        if self.requested and not self._stopped and exc_type is None:
            _stop_now()

    def check(self, save: Callable[[], None]) -> None:
        """After a finished step: when a stop was requested, `save()` the state and raise KeyboardInterrupt."""
        if self.requested:
            save()
            self._stopped = True
            _stop_now()


def auto_threads(processes: int = 1) -> int:
    """The threads a process takes for `threads: 0`: its share of the cores where several processes share the
    machine (probing them at once would measure each other), else what `_probe_threads` finds faster now."""
    if processes > 1:
        return max(1, (os.cpu_count() or 1) // processes)
    return _probe_threads()


def _probe_threads() -> int:
    """1 or all cores, whichever runs a training step of an inverted-residual block (batch 128, 14x14, expansion
    6: about 0.1 s) faster right now; interleaved, best of seven after a warm-up round. One thread must win by
    1.5x: beside a busy process all cores run several times slower, while a momentary stall of a shared VM's
    other core can make one thread look a little faster for a few rounds, and a run on one thread of two trains
    at half speed. Contention that comes later is the training loops' (`ThreadGovernor`)."""
    import torch

    cores = os.cpu_count() or 1
    if cores == 1:
        return 1
    nn = torch.nn
    block = nn.Sequential(nn.Conv2d(32, 192, 1), nn.BatchNorm2d(192), nn.ReLU6(),
                          nn.Conv2d(192, 192, 3, padding=1, groups=192), nn.BatchNorm2d(192), nn.ReLU6(),
                          nn.Conv2d(192, 32, 1)).to(memory_format=torch.channels_last)
    x = torch.randn(128, 32, 14, 14).contiguous(memory_format=torch.channels_last)
    timing: dict[int, float] = {}
    previous = torch.get_num_threads()
    for round_ in range(8):
        for threads in (1, cores):
            torch.set_num_threads(threads)
            start = time.perf_counter()
            block(x).sum().backward()
            if round_:
                timing[threads] = min(timing.get(threads, float("inf")), time.perf_counter() - start)
    torch.set_num_threads(previous)
    best = _faster_thread_count(timing[1], timing[cores], cores)
    logger.info("thread probe: %s -> %d threads", {k: f"{v * 1e3:.0f} ms" for k, v in timing.items()}, best)
    return best


def _faster_thread_count(one_thread_s: float, all_cores_s: float, cores: int) -> int:
    """The probe's verdict: 1 thread only when it is at least 1.5x as fast as all cores."""
    return 1 if 1.5 * one_thread_s < all_cores_s else cores


class ThreadGovernor:
    """Keeps a training loop fast on a shared machine by watching its step times.

    With 2 torch threads on a 2-core machine, one busy neighbour made supernet training 16x slower: every
    parallel region waits for the thread that shares its core. One thread beside the neighbour loses only its
    share. The governor takes the median step time of the first window as the machine's pace; when a later
    window is `slowdown` times slower, it drops to 1 thread, and every `retry_every` steps it tries all threads
    again for one window, keeping whichever was faster. Every change is logged. Thread counts change float
    summation order, so a run that adapted is not bit-identical to one that did not (`adapt_threads: false`
    keeps the count fixed).
    """

    def __init__(self, window: int = 10, slowdown: float = 1.8, retry_every: int = 300, warmup: int = 5,
                 set_threads: Callable[[int], None] | None = None, enabled: bool = True):
        """`set_threads`: how the loop changes the threads it uses (default: torch's thread count); the
        governor starts from torch's current count either way. `enabled`: false keeps the count fixed (the
        run's `adapt_threads`)."""
        import torch

        self._set_threads = set_threads or torch.set_num_threads
        self.max_threads = self._threads = torch.get_num_threads()
        self.window, self.slowdown, self.retry_every, self.warmup = window, slowdown, retry_every, warmup
        self.active = enabled and self.max_threads > 1
        self.pace: float | None = None  # median step time with all threads, as first measured
        self.single_median: float | None = None
        self.steps_single = 0
        self._times: list[float] = []
        self._seen = 0

    def __enter__(self) -> "ThreadGovernor":
        return self

    def __exit__(self, *exc) -> None:
        """The next stage starts with all threads again (and measures its own pace)."""
        self._set_threads(self.max_threads)

    @property
    def threads(self) -> int:
        return self._threads

    def _set(self, threads: int, why: str) -> None:
        self._threads = threads
        self._set_threads(threads)
        logger.warning("training on %d thread%s: %s", threads, "s" if threads > 1 else "", why)

    def new_phase(self) -> None:
        """The loop's steps change in kind (e.g. architecture steps join weight steps): measure the pace anew."""
        self.pace, self._seen = None, 0
        self._times.clear()

    @contextmanager
    def timed_step(self) -> Iterator[None]:
        """Time the enclosed training step and `observe` it."""
        started = time.perf_counter()
        yield
        self.observe(time.perf_counter() - started)

    def observe(self, seconds: float) -> None:
        """Record one step's wall time; may change the thread count between steps."""
        if not self.active:
            return
        self._seen += 1
        if self._seen <= self.warmup:
            return
        self._times.append(seconds)
        if len(self._times) < self.window:
            return
        median = sorted(self._times)[len(self._times) // 2]
        self._times.clear()
        if self.threads == 1:
            self.single_median, self.steps_single = median, self.steps_single + self.window
            if self.steps_single >= self.retry_every:
                self.steps_single = 0
                self._set(self.max_threads, "trying all threads again")
        elif self.pace is None:
            self.pace = median
        elif self.single_median is not None:  # a trial of all threads after a spell on one
            if median < 0.9 * self.single_median:
                logger.warning("all %d threads are faster again (%.0f ms a step, %.0f ms on 1)", self.max_threads,
                               median * 1e3, self.single_median * 1e3)
                self.single_median = None
            else:
                self._set(1, f"still slower with all threads ({median * 1e3:.0f} ms a step)")
        elif median > self.slowdown * self.pace:
            self._set(1, f"steps take {median / self.pace:.1f}x as long as at first ({median * 1e3:.0f} ms): "
                         "another process is using the cores")
