"""The records a run's results are made of, each with the one reader and writer of its table and journal lines:
an evaluated arch (`Candidate`) with its finalised scores (`FinalScores`), what a search hands to finalisation, the
report, export and the scripts (candidates.csv, the evaluation journal); a scored baseline (`BaselineResult`,
baselines.csv and its journal).

candidates.csv has one row per candidate, in id order: `id`, `generation`, `arch` (compact JSON, sorted keys),
`<metric>` (val, inherited weights), `test_<metric>` (the front only), `latency_ms`, `cost_model`, `params`,
`macs`, `is_pareto`, then the finalised scores `final_<metric>`, `final_test_<metric>`, `final_int8_test_<metric>`,
`final_epochs`, `is_final_pareto`, then the task's other finalised test scores (`final_test_ssim`) and a
strategy's own figures (`expected_latency_ms`), in the order the rows first name them. A field a candidate lacks
is an empty cell.

baselines.csv has one row per baseline: `name`, `type`, `<metric>`, `test_<metric>`, the task's other test scores
(sorted), `latency_ms`, its latency on each NPU generation (`<device>_ms`), `cost_model`, `params`, `macs`,
`epochs` (trained ones), `note`, `scores_from` (only when a baseline's figures were measured elsewhere), `arch`
(compact JSON, sorted keys).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

from search_spaces import arch_key

from .errors import RunDirError
from .pareto import pareto_mask
from .rundir import read_csv, write_csv

__all__ = ["Candidate", "FinalScores", "COSTS", "write_candidates", "read_candidates", "candidate_rows",
           "with_pareto", "metric_of_columns", "BaselineResult", "baseline_rows", "write_baseline_results",
           "read_baseline_results"]

#: a candidate's costs, which a search may minimise (its fields of these names): latency, then MACs and params
COSTS = ("latency_ms", "macs", "params")

#: the columns every candidates.csv has, in order (`{metric}` the task's metric)
CANDIDATE_COLUMNS = ("id", "generation", "arch", "{metric}", "test_{metric}", "latency_ms", "cost_model", "params",
                     "macs", "is_pareto", "final_{metric}", "final_test_{metric}", "final_int8_test_{metric}",
                     "final_epochs", "is_final_pareto")
#: the journal fields of a candidate besides its metric, its generation and its strategy's figures
_JOURNAL_FIELDS = ("key", "id", "arch", "latency_ms", "cost_model", "params", "macs")


@dataclass
class FinalScores:
    """An arch's scores after finalisation (`nas.training.finalize`).

    Args:
        val: the task's metric on the whole val split (`final_<metric>`).
        test: the task's test scores by name, its metric first (`final_test_<name>`).
        epochs: the epochs it was trained for; 0 when its inherited weights scored better and were kept.
        int8_test: the test metric of its INT8 model (`search.finalize.int8`), None when not scored.
    """

    val: float
    test: dict[str, float]
    epochs: float
    int8_test: float | None = None

    def journal_entry(self, metric: str) -> dict[str, Any]:
        """The line of the finalisation journal (without the arch's key and id)."""
        return {f"final_{metric}": self.val, **{f"final_test_{k}": v for k, v in self.test.items()},
                "final_epochs": self.epochs}

    @classmethod
    def from_journal(cls, entry: dict[str, Any], metric: str) -> FinalScores:
        return cls(entry[f"final_{metric}"],
                   {k.removeprefix("final_test_"): v for k, v in entry.items() if k.startswith("final_test_")},
                   entry["final_epochs"])


@dataclass
class Candidate:
    """An evaluated arch of a run.

    Args:
        arch: the arch (its space's dict).
        key: its key in the evaluation journal: the arch's key (`search_spaces.arch_key`), or the strategy's (the
            differentiable search's `epoch<N>`: one candidate per search epoch).
        metric: the task's metric (`top1`, `psnr`), the name of `score`.
        score: the metric on the val split, with the supernet's (inherited) weights.
        latency_ms: its latency on `cost_model` (the cost model's name).
        params, macs: of the deployed network (batch norm folded).
        id: its place in the run's evaluations (None before the journal numbers it).
        generation: the strategy's generation (search epoch) that evaluated it; None when the strategy has none.
        expected_latency_ms: the differentiable search's expected latency at that epoch; None for other strategies.
        test_score: the metric on the test split, inherited weights (the front only; None elsewhere).
        final: its finalised scores; None when it was not finalised.
        is_pareto: on the front of (score, latency) of the run's candidates.
        is_final_pareto: on the front of (final val score, latency) of the finalised candidates.
    """

    arch: dict
    key: str
    metric: str
    score: float
    latency_ms: float
    cost_model: str
    params: int
    macs: int
    id: int | None = None
    generation: int | None = None
    expected_latency_ms: float | None = None
    test_score: float | None = None
    final: FinalScores | None = None
    is_pareto: bool = False
    is_final_pareto: bool = False

    @property
    def test_figure(self) -> float | None:
        """Its test figure: finalised if it has one, else inherited; None if it was not scored on the test split."""
        return self.final.test[self.metric] if self.final is not None else self.test_score

    @property
    def arch_text(self) -> str:
        """The arch as candidates.csv holds it: compact JSON, sorted keys."""
        return arch_key(self.arch)

    def cost(self, name: str) -> float:
        """Its cost `name`, one of `COSTS` (a search's objectives name them)."""
        if name not in COSTS:
            raise ValueError(f"{name!r} is not a cost of a candidate ({', '.join(COSTS)})")
        return getattr(self, name)

    def journal_entry(self) -> dict[str, Any]:
        """The line of the evaluation journal (RUN_DIR/checkpoint/evaluations.jsonl)."""
        entry = {name: getattr(self, name) for name in _JOURNAL_FIELDS if getattr(self, name) is not None}
        entry[self.metric] = self.score
        for name in ("generation", "expected_latency_ms"):
            if getattr(self, name) is not None:
                entry[name] = getattr(self, name)
        return entry

    @classmethod
    def from_journal(cls, entry: dict[str, Any], metric: str) -> Candidate:
        return cls(entry["arch"], entry["key"], metric, entry[metric], entry["latency_ms"], entry["cost_model"],
                   entry["params"], entry["macs"], entry.get("id"), entry.get("generation"),
                   entry.get("expected_latency_ms"))


def with_pareto(candidates: Sequence[Candidate]) -> list[Candidate]:
    """`candidates` in id order, with `is_pareto` over (score, latency) and `is_final_pareto` over (final val
    score, latency) of the finalised ones."""
    candidates = sorted(candidates, key=lambda c: c.id)
    on_front = pareto_mask([c.score for c in candidates], [c.latency_ms for c in candidates])
    finalised = [c for c in candidates if c.final is not None]
    on_final_front = pareto_mask([c.final.val for c in finalised], [c.latency_ms for c in finalised])
    final_front = {id(c) for c, on in zip(finalised, on_final_front) if on}
    return [replace(c, is_pareto=bool(on), is_final_pareto=id(c) in final_front)
            for c, on in zip(candidates, on_front)]


def _blank(value):
    return "" if value is None else value


def _row(c: Candidate) -> dict[str, Any]:
    m, final = c.metric, c.final
    row = {"id": c.id, "generation": _blank(c.generation),
           "arch": c.arch_text, m: c.score,
           f"test_{m}": _blank(c.test_score), "latency_ms": c.latency_ms, "cost_model": c.cost_model,
           "params": c.params, "macs": c.macs, "is_pareto": c.is_pareto}
    if final is None:
        row |= {f"final_{m}": "", f"final_test_{m}": "", f"final_int8_test_{m}": "", "final_epochs": "",
                "is_final_pareto": c.is_final_pareto}
    else:
        row |= {f"final_{m}": final.val, f"final_test_{m}": final.test.get(m, ""),
                f"final_int8_test_{m}": _blank(final.int8_test), "final_epochs": final.epochs,
                "is_final_pareto": c.is_final_pareto}
        row |= {f"final_test_{k}": v for k, v in final.test.items() if k != m}
    if c.expected_latency_ms is not None:
        row["expected_latency_ms"] = c.expected_latency_ms
    return row


def candidate_rows(candidates: Sequence[Candidate]) -> tuple[list[dict[str, Any]], list[str]]:
    """The rows and columns of candidates.csv (see the module docstring) for `candidates` (`with_pareto`'s)."""
    rows = [_row(c) for c in candidates]
    columns = [c.format(metric=candidates[0].metric) for c in CANDIDATE_COLUMNS] if candidates else []
    for row in rows:
        columns += [k for k in row if k not in columns]
    return rows, columns


def write_candidates(path: Path, candidates: Sequence[Candidate]) -> list[Candidate]:
    """Write candidates.csv (atomically) of `candidates`, their fronts marked (`with_pareto`); returns those."""
    marked = with_pareto(candidates)
    rows, columns = candidate_rows(marked)
    write_csv(path, rows, columns)
    return marked


def _number(text: str, kind=float):
    return None if text == "" else kind(text)


def _epochs(text: str) -> float:
    """A `final_epochs` cell: 0 (the inherited weights kept) or the epochs trained, as written."""
    return int(text) if text.isdigit() else float(text)


def metric_of_columns(columns: Sequence[str], path: Path) -> str:
    """The quality column of a results table (`path`): top1 (classification) or psnr (super-resolution)."""
    for name in ("top1", "psnr"):
        if name in columns:
            return name
    raise RunDirError(f"{path} has neither a top1 nor a psnr column: not a vpunas run, or damaged")


def read_candidates(path: Path) -> list[Candidate]:
    """The candidates of a run's candidates.csv (columns it does not know are left out; `key` is the arch's)."""
    rows = read_csv(path)
    if not rows:
        raise RunDirError(f"{path} has no candidates: not a finished vpunas search, or damaged")
    m = metric_of_columns(list(rows[0]), path)
    out = []
    for r in rows:
        final = None
        if r.get(f"final_{m}", "") != "":
            tests = {k.removeprefix("final_test_"): float(v) for k, v in r.items()
                     if k.startswith("final_test_") and v != ""}
            final = FinalScores(float(r[f"final_{m}"]), tests, _epochs(r["final_epochs"]),
                                _number(r.get(f"final_int8_test_{m}", "")))
        arch = json.loads(r["arch"])
        out.append(Candidate(arch, arch_key(arch), m, float(r[m]), float(r["latency_ms"]), r["cost_model"],
                             int(r["params"]), int(r["macs"]), int(r["id"]), _number(r["generation"], int),
                             _number(r.get("expected_latency_ms", "")), _number(r.get(f"test_{m}", "")), final,
                             r["is_pareto"] == "True", r.get("is_final_pareto") == "True"))
    return out


@dataclass
class BaselineResult:
    """A scored baseline of a run (`nas.baselines`).

    Args:
        name, type: its config entry's (`nas.baseline_entries`).
        arch: an arch of the space (subnet, standalone), the network's identity (reference, zoo:
            `{"network": ...}`), or {} (bicubic).
        metric: the task's metric, the name of `score`.
        score: the metric on the val split (None where an older baselines.csv lacks it).
        test: the task's test scores by name, its metric first.
        latency_ms: its latency on `cost_model` (the run's cost model's name).
        params, macs: of the network.
        note: how it was obtained, in words.
        epochs: how long it trained (trained types), else None.
        device_ms: its latency on each NPU generation (VPUNN), by device.
        scores_from: where its figures were measured when not in this run (a zoo entry's `measured:`), else "".
    """

    name: str
    type: str
    arch: dict
    metric: str
    score: float | None
    test: dict[str, float]
    latency_ms: float
    cost_model: str
    params: int
    macs: int
    note: str
    epochs: float | None = None
    device_ms: dict[str, float] = field(default_factory=dict)
    scores_from: str = ""

    @property
    def test_figure(self) -> float | None:
        """Its metric on the test split; None if it was not scored there."""
        return self.test.get(self.metric)

    def journal_entry(self) -> dict[str, Any]:
        """The line of the baselines' journal (RUN_DIR/checkpoint/baselines.jsonl), keyed by its name."""
        entry = {"key": self.name, "name": self.name, "type": self.type, "arch": self.arch, self.metric: self.score,
                 **{f"test_{k}": v for k, v in self.test.items()}, "latency_ms": self.latency_ms,
                 "cost_model": self.cost_model, "params": self.params, "macs": self.macs, "note": self.note,
                 **{f"{d}_ms": v for d, v in self.device_ms.items()}}
        if self.epochs is not None:
            entry["epochs"] = self.epochs
        if self.scores_from:
            entry["scores_from"] = self.scores_from
        return entry

    @classmethod
    def from_journal(cls, entry: dict[str, Any], metric: str) -> BaselineResult:
        return cls(entry["name"], entry["type"], entry["arch"], metric, entry.get(metric),
                   {k.removeprefix("test_"): v for k, v in entry.items() if k.startswith("test_")},
                   entry["latency_ms"], entry["cost_model"], entry["params"], entry["macs"], entry["note"],
                   entry.get("epochs"), {k.removesuffix("_ms"): v for k, v in entry.items()
                                         if k.endswith("_ms") and k != "latency_ms"},
                   entry.get("scores_from", ""))


def baseline_rows(results: Sequence[BaselineResult], metric: str,
                  devices: Sequence[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """The rows and columns of baselines.csv (see the module docstring), a latency column for each of `devices`."""
    extra = sorted({k for r in results for k in r.test if k != metric})
    measured = ["scores_from"] if any(r.scores_from for r in results) else []
    columns = ["name", "type", metric, f"test_{metric}", *(f"test_{k}" for k in extra), "latency_ms",
               *(f"{d}_ms" for d in devices), "cost_model", "params", "macs", "epochs", "note", *measured, "arch"]
    rows = [{"name": r.name, "type": r.type, metric: _blank(r.score),
             **{f"test_{k}": r.test.get(k, "") for k in (metric, *extra)}, "latency_ms": r.latency_ms,
             **{f"{d}_ms": r.device_ms.get(d, "") for d in devices}, "cost_model": r.cost_model, "params": r.params,
             "macs": r.macs, "epochs": _blank(r.epochs), "note": r.note,
             **({"scores_from": r.scores_from} if measured else {}), "arch": arch_key(r.arch)} for r in results]
    return rows, columns


def write_baseline_results(path: Path, results: Sequence[BaselineResult], metric: str, devices: Sequence[str]) -> None:
    """Write baselines.csv (atomically), a latency column for each of `devices`."""
    write_csv(path, *baseline_rows(results, metric, devices))


def read_baseline_results(path: Path) -> list[BaselineResult]:
    """The baselines of a run's baselines.csv ([] when the run has none); the metric is its third column."""
    if not Path(path).exists():
        return []
    rows = read_csv(path)
    if not rows:
        return []
    metric = metric_of_columns(list(rows[0]), path)
    if "type" not in rows[0]:
        raise RunDirError(f"{path}: no type column (a baselines table of an older vpunas); score the run's "
                          "baselines again to read it")
    devices = [c.removesuffix("_ms") for c in rows[0] if c.endswith("_ms") and c != "latency_ms"]
    out = []
    for r in rows:
        try:
            arch = json.loads(r.get("arch") or "{}")
        except ValueError:
            raise RunDirError(f"{path}: baseline {r['name']!r} has an arch that is not JSON: damaged") from None
        note = r.get("note", "")
        out.append(BaselineResult(
            r["name"], r["type"], arch, metric, _number(r.get(metric, "")),
            {k.removeprefix("test_"): float(v) for k, v in r.items() if k.startswith("test_") and v != ""},
            float(r["latency_ms"]), r["cost_model"], int(r["params"]), int(r["macs"]), note,
            _number(r.get("epochs", "")), {d: float(r[f"{d}_ms"]) for d in devices if r.get(f"{d}_ms", "") != ""},
            r.get("scores_from", "")))
    return out
