"""The run directory: where a search writes its config, results, report, checkpoints and exported models.

Every file is written atomically (a temporary file renamed over the target) or appended line by line with a
flush and fsync, so a run killed at any point leaves either the previous complete file or the new one, and
`--resume` finds all finished work.
"""
from __future__ import annotations

import csv
import io
import json
import logging
import os
import shutil
import pickle
import uuid
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch

from .errors import RunDirError

logger = logging.getLogger(__name__)

__all__ = ["RunDir", "EvaluationJournal", "atomic_write_text", "atomic_write_bytes", "atomic_torch_save",
           "atomic_copy", "load_checkpoint", "write_csv", "read_csv"]


def _atomic_replace(path: Path, write) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}"
    # created like a plain open() would (0666 less the umask), unlike mkstemp's 0600
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: Path, data: bytes) -> None:
    _atomic_replace(path, lambda f: f.write(data))


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_copy(source: Path, path: Path) -> None:
    """Copy file `source` to `path`, which is then either absent or whole."""
    with open(source, "rb") as src:
        _atomic_replace(path, lambda f: shutil.copyfileobj(src, f, 1 << 20))


def atomic_torch_save(obj: Any, path: Path) -> None:
    _atomic_replace(path, lambda f: torch.save(obj, f))


def load_checkpoint(path: Path, mmap: bool = False) -> Any:
    """A file written by `atomic_torch_save`; a damaged one (truncated, overwritten) is a `RunDirError` naming
    it, not a traceback from the unpickler. `mmap`: tensors are mapped, read only when used (a look at a
    checkpoint's other fields then costs no read of its weights)."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except (RuntimeError, EOFError, OSError, ValueError, pickle.UnpicklingError) as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise RunDirError(f"{path} is damaged and cannot be read ({str(exc).splitlines()[0][:120]}); delete it to "
                          "redo that stage, or start a new run in another run directory") from None


def write_csv(path: Path, rows: Sequence[dict], columns: Sequence[str]) -> None:
    """A results table of a run (candidates.csv, baselines.csv, probe.csv), written atomically."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(path, buf.getvalue())


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


class EvaluationJournal:
    """Append-only JSON-lines record of finished evaluations: the source of truth for resuming a search.

    A line cut short by a kill is the only thing that can be damaged; `load` drops such a last line (it was not
    a finished evaluation) and rewrites the file without it.
    """

    def __init__(self, path: Path):
        self.path = Path(path)

    def load(self) -> list[dict]:
        if not self.path.exists():
            return []
        lines = self.path.read_text(encoding="utf-8").splitlines(keepends=True)
        records = []
        for i, line in enumerate(lines):
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                if i != len(lines) - 1:
                    raise RunDirError(f"{self.path}: line {i + 1} is corrupt (not the last line, so not an "
                                     "interrupted write); the journal cannot be trusted") from None
                logger.warning("%s: dropping an incomplete last line left by an interrupted run", self.path)
                atomic_write_text(self.path, "".join(lines[:-1]))
        return records

    def append(self, record: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def __iter__(self) -> Iterator[dict]:
        return iter(self.load())


class RunDir:
    """Paths of one run (see design.md, "A run directory")."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    config = property(lambda self: self.path / "config.yaml")
    candidates = property(lambda self: self.path / "candidates.csv")
    baselines = property(lambda self: self.path / "baselines.csv")
    pareto_png = property(lambda self: self.path / "pareto.png")
    report_html = property(lambda self: self.path / "report.html")
    stage_times = property(lambda self: self.path / "stage_times.json")
    #: the probe set's inherited and standalone scores (`nas.ranking.probe`)
    probe = property(lambda self: self.path / "probe.csv")
    checkpoint_dir = property(lambda self: self.path / "checkpoint")
    models_dir = property(lambda self: self.path / "models")
    supernet_checkpoint = property(lambda self: self.checkpoint_dir / "supernet.pt")
    journal = property(lambda self: EvaluationJournal(self.checkpoint_dir / "evaluations.jsonl"))
    baseline_journal = property(lambda self: EvaluationJournal(self.checkpoint_dir / "baselines.jsonl"))
    test_journal = property(lambda self: EvaluationJournal(self.checkpoint_dir / "test_metrics.jsonl"))
    #: the search strategy's `state_dict()` (JSON; `nas.strategies.SearchStrategy.persists_state`)
    strategy_state = property(lambda self: self.checkpoint_dir / "strategy.json")
    log = property(lambda self: self.path / "run.log")
    #: what a reader must see before the results (a stage that learned nothing): a JSON list of lines
    warnings = property(lambda self: self.path / "warnings.json")

    def exists(self) -> bool:
        return self.config.exists()
