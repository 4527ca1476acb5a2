"""A run killed with SIGTERM at any moment resumes to the result of a run never killed, repeating no step.

(Its own file so that the test-suite's two processes start it early: `--dist loadfile` hands out files in order.)
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


def test_terminated_runs_resume_to_the_same_result(smoke_run, tmp_path):
    """SIGTERM the smoke run at a seeded random moment in each third of its course (training, search,
    finalisation), resume each time:
    the same candidates.csv, and no training step done twice (the sessions' step counts add up to the total).
    tests/test_finalize.py interrupts finalisation at a chosen step, tests/test_differentiable.py the differentiable
    search."""
    out = tmp_path / "killed"
    kills = np.random.default_rng(7).uniform([6, 34, 62], [34, 62, 90])
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "nas.cli", "search", SMOKE, "--out", str(out), "--no-progress"]
    started = time.monotonic()
    for kill_at in kills:
        proc = subprocess.Popen(cmd + (["--resume"] if out.joinpath("config.yaml").exists() else []), cwd=REPO,
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            proc.wait(timeout=max(0.5, kill_at - (time.monotonic() - started)))
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=120) in (0, 130, -signal.SIGTERM)  # -15: before the CLI set its handler
    final = subprocess.run(cmd + ["--resume"] if out.joinpath("config.yaml").exists() else cmd, cwd=REPO, env=env,
                           capture_output=True, text=True)
    assert final.returncode == 0, final.stderr[-2000:]
    assert RunDir(out).candidates.read_text() == smoke_run.candidates.read_text(), f"kills at {kills}"
    assert RunDir(out).baselines.read_text() == smoke_run.baselines.read_text()
    log = RunDir(out).log.read_text()
    for stage in ("supernet training", "finalisation training"):
        sessions = [(int(n), int(total)) for n, total in
                    re.findall(stage + r": (\d+) steps in this session, at step \d+ of (\d+)", log)]
        assert sessions and sum(n for n, _ in sessions) == sessions[0][1], (stage, sessions, kills)
