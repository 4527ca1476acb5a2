"""A run killed with SIGTERM at any moment resumes to the result of a run never killed, repeating no step.

(Its own file: the suite's processes take whole files, so the other one works through the rest beside it.)
"""
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np

from conftest import REPO, SMOKE
from nas.rundir import RunDir


def _terminated(cmd: list[str], out, env: dict, after: float, stderr_path) -> int | None:
    """Start `cmd` (resuming when `out` holds a run), SIGTERM it `after` seconds in: its exit status, None when it
    finished first. A terminated run must say it was interrupted (exit 130), or die of the signal before the CLI
    set its handler (-15), or exit 0 when its work was done (the signal ignored while the process exits); never
    exit 1."""
    with open(stderr_path, "w") as stderr:
        proc = subprocess.Popen(cmd + (["--resume"] if out.joinpath("config.yaml").exists() else []), cwd=REPO,
                                env=env, stdout=subprocess.DEVNULL, stderr=stderr)
        try:
            proc.wait(timeout=after)
            return None
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=120)
    said = stderr_path.read_text()
    finished = code == 0 and "INFO nas.run: run finished in" in said  # the signal came as the process exited
    assert code in (130, -signal.SIGTERM) or finished, f"SIGTERM {after:.2f} s in: exit {code}\n{said[-3000:]}"
    assert code != 130 or said.rstrip().endswith("interrupted; finished work is saved (resume a search with --resume)")
    return code


def test_terminated_runs_resume_to_the_same_result(request, tmp_path):
    """SIGTERM the smoke run at a seeded random moment in each third of its course (training, search,
    finalisation), and a resumed run at four moments of its first seconds (imports, config and checkpoint
    loading: an interrupt cut torch's import short there, whose re-import then failed with exit 1), resume each
    time: the same candidates.csv, and no training step done twice (the sessions' step counts add up to the total).
    tests/test_finalize.py interrupts finalisation at a chosen step, tests/test_differentiable.py the differentiable
    search."""
    out = tmp_path / "killed"
    rng = np.random.default_rng(7)
    course = rng.uniform([6, 34, 62], [34, 62, 90])
    first_seconds = np.sort(rng.uniform(0.05, 4.0, 4))
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "nas.cli", "search", SMOKE, "--out", str(out), "--no-progress"]
    started = time.monotonic()
    for i, kill_at in enumerate(course):
        _terminated(cmd, out, env, max(0.5, kill_at - (time.monotonic() - started)), tmp_path / "stderr.txt")
        if i == 0:
            early = time.monotonic()
            for after in first_seconds:
                _terminated(cmd, out, env, after, tmp_path / "stderr.txt")
            started += time.monotonic() - early  # the course's clock runs on where the first kill stopped it
    kills = [*course, *first_seconds]
    final = subprocess.run(cmd + ["--resume"] if out.joinpath("config.yaml").exists() else cmd, cwd=REPO, env=env,
                           capture_output=True, text=True)
    assert final.returncode == 0, final.stderr[-2000:]
    smoke_run = request.getfixturevalue("smoke_run")  # needed only now: the other process may be running it
    assert RunDir(out).candidates.read_text() == smoke_run.candidates.read_text(), f"kills at {kills}"
    assert RunDir(out).baselines.read_text() == smoke_run.baselines.read_text()
    log = RunDir(out).log.read_text()
    for stage in ("supernet training", "finalisation training"):
        sessions = [(int(n), int(total)) for n, total in
                    re.findall(stage + r": (\d+) steps in this session, at step \d+ of (\d+)", log)]
        assert sessions and sum(n for n, _ in sessions) == sessions[0][1], (stage, sessions, kills)
