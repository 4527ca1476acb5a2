"""`nas.runtime`: batch-sized tensors reuse freed memory instead of fresh pages; stop signals that never cut an
import short; stop requests between training steps."""
import os
import resource
import signal
import subprocess
import sys
import textwrap

import pytest
import torch

from conftest import REPO
from nas.runtime import StopRequests, keep_freed_memory

BIG = 40 << 20  # bytes: above glibc's largest automatic mmap threshold (32 MiB), like a batch of activations


def minor_faults_of_one_batch() -> int:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    activations = [torch.ones(BIG, dtype=torch.uint8), torch.ones(BIG // 3, dtype=torch.uint8)]
    del activations
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def test_freed_memory_is_reused():
    assert keep_freed_memory()
    for _ in range(20):  # the heap settles (aligned allocations leave a few gaps at first)
        minor_faults_of_one_batch()
    pages = BIG // resource.getpagesize()
    faults = [minor_faults_of_one_batch() for _ in range(5)]
    assert max(faults) < pages // 10, faults  # glibc's default maps and faults in every page, every time


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_in_a_loop_stops_after_the_step_with_a_checkpoint(sig):
    before = signal.getsignal(sig)
    saved = []
    with StopRequests() as stop:
        stop.check(lambda: saved.append("early"))  # nothing requested: no save, no stop
        os.kill(os.getpid(), sig)  # lands "in the middle of a step": only recorded
        assert stop.requested and saved == []
        with pytest.raises(KeyboardInterrupt):
            stop.check(lambda: saved.append("checkpoint"))
    assert saved == ["checkpoint"]
    assert signal.getsignal(sig) is before  # handlers restored


def test_a_second_signal_stops_at_once():
    with StopRequests():
        os.kill(os.getpid(), signal.SIGTERM)
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)


def test_a_signal_after_the_last_check_stops_on_leaving_the_loop():
    with pytest.raises(KeyboardInterrupt):
        with StopRequests() as stop:
            stop.check(lambda: None)
            os.kill(os.getpid(), signal.SIGTERM)  # the loop's last step is done and saved


def test_a_stop_signal_waits_for_the_import_it_lands_in(tmp_path):
    """SIGTERM in the middle of an import: the KeyboardInterrupt comes after the import's end, the module whole
    (torch's import cut short left a module that could be neither used nor imported again)."""
    (tmp_path / "slow_module.py").write_text(textwrap.dedent("""
        import os, signal, time
        os.kill(os.getpid(), signal.SIGTERM)
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:  # Python code running within the import: where a handler would raise
            pass
        complete = True
    """))
    script = textwrap.dedent("""
        import sys, time
        from nas.runtime import interrupt_on_stop_signals, interrupt_received
        interrupt_on_stop_signals()
        try:
            import slow_module
            time.sleep(5)
        except KeyboardInterrupt:
            print("interrupted after the import:", sys.modules["slow_module"].complete, interrupt_received())
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{REPO}"))
    assert done.stdout.strip() == "interrupted after the import: True True", done.stderr


def test_the_thread_governor_drops_to_one_thread_under_contention_and_comes_back():
    from nas.runtime import ThreadGovernor

    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with ThreadGovernor(window=5, retry_every=10, warmup=0) as governor:
            feed = lambda seconds, n: [governor.observe(seconds) for _ in range(n)]  # noqa: E731
            feed(0.10, 10)  # the machine's pace, then steady
            assert governor.threads == 2
            feed(0.30, 5)  # a neighbour: 3x slower
            assert governor.threads == 1
            feed(0.20, 10)  # on one thread; then a trial of both
            assert governor.threads == 2
            feed(0.30, 5)  # both threads still slower than one: back to one
            assert governor.threads == 1
            feed(0.20, 10)
            feed(0.10, 5)  # the neighbour left: both threads win the trial and stay
            assert governor.threads == 2
            feed(0.12, 20)
            assert governor.threads == 2
            feed(0.30, 5)
            assert governor.threads == 1
        assert torch.get_num_threads() == 2  # the next stage starts with all threads
    finally:
        torch.set_num_threads(previous)


def test_a_disabled_thread_governor_never_changes_threads():
    from nas.runtime import ThreadGovernor

    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        governor = ThreadGovernor(window=5, warmup=0, enabled=False)
        for seconds in [0.1] * 5 + [1.0] * 20:
            governor.observe(seconds)
        assert governor.threads == 2
    finally:
        torch.set_num_threads(previous)


@pytest.mark.parametrize("one, all_cores, expected", [(85, 109, 4), (70, 100, 4), (60, 100, 1), (50, 600, 1),
                                                      (83, 49, 4)])
def test_the_thread_probe_picks_one_thread_only_when_it_clearly_wins(one, all_cores, expected):
    """A stall of a moment (85 against 109 ms) keeps all cores; a busy neighbour (50 against 600) does not."""
    from nas.runtime import _faster_thread_count

    assert _faster_thread_count(one / 1e3, all_cores / 1e3, 4) == expected
