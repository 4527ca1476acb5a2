"""How far a latency table can be trusted, and how a table measured elsewhere is corrected for this machine.

A table sums per-block latencies measured on one machine. Moved to another (another CPU, another OpenVINO), its
numbers are off by a factor and a fixed per-inference cost, while its ranking mostly survives. Whole networks of
the space measured here give both the table's error on this machine and a `LatencyCorrection` fitted to them.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np

from hw_cost.cost_model import CostModel, CostModelError
from hw_cost.lut import LatencyCorrection, LatencyTable, LutCostModel
from hw_cost.openvino_runtime import openvino
from hw_cost.profiler import OpenVinoProfiler
from search_spaces import SearchSpace, arch_key

from ..errors import RunDirError
from ..randomness import RunRandom
from ..records import Candidate
from ..rundir import EvaluationJournal, atomic_write_text
from ..search_context import SearchContext

logger = logging.getLogger(__name__)

__all__ = ["agreement", "validate_table", "correct_for_this_machine", "measure_here",
           "read_correction_record", "load_run_correction", "measured_beside_predicted", "measured_latencies",
           "plot_validation"]

CORRECTION_FILE = "latency_correction.json"
#: a table whose error on the networks measured here is at most this (MAPE, %) is used as measured by "auto"
AGREEMENT_MAPE_PCT = 10.0


def _predicted(space: SearchSpace, model: CostModel, archs: list[dict]) -> np.ndarray:
    return np.array([model.latency_ms(space.blocks(a)) for a in archs])


def measure_here(space: SearchSpace, table: LatencyTable, archs: list[dict]) -> np.ndarray:
    """Each arch's end-to-end latency (ms) on this machine, measured as the table was (device, precision,
    threads, repeats), interleaved so that drift of a shared machine hits all archs alike."""
    supernet = space.build_supernet().eval()
    networks = [supernet.extract(arch).eval() for arch in archs]
    stats = OpenVinoProfiler(table.settings()).measure_many(networks, (1, *space.input_shape), rounds=5)
    return np.array([s.median_ms for s in stats])


def agreement(predicted, measured) -> dict:
    """nn-Meter's figures of a latency predictor: mean absolute percentage error, the share of networks within
    +-10 % of measured, Spearman and Kendall rank correlation."""
    from scipy.stats import kendalltau, spearmanr

    predicted, measured = np.asarray(predicted, dtype=float), np.asarray(measured, dtype=float)
    error = np.abs(predicted - measured) / measured
    rank = lambda f: round(float(f(predicted, measured).statistic), 4) if len(measured) > 2 else None
    return {"archs": len(measured), "mape_pct": round(float(error.mean() * 100), 2),
            "within_10pct": round(float(np.mean(error <= 0.10)), 4), "spearman": rank(spearmanr),
            "kendall_tau": rank(kendalltau)}


def validate_table(space: SearchSpace, table: LatencyTable, n_archs: int, seed: int = 0,
                   calibration_archs: int = 8) -> dict:
    """Measure `n_archs` archs of `space` here and compare them with the table, as it is and corrected.

    The correction is fitted on the first `calibration_archs` of them, as a run does at its start; the figures
    after correction are those of the other archs (held out), so they say what a run can expect.
    """
    archs = space.spread_sample(n_archs, RunRandom(seed).numpy("lut_correction.archs"))
    k = min(calibration_archs, len(archs) - 2)
    if k < 2:
        raise CostModelError(f"a table's validation needs at least 4 distinct archs (2 fit the correction, 2 check "
                             f"it); {len(archs)} asked for or in the space")
    predicted, measured = _predicted(space, LutCostModel(table), archs), measure_here(space, table, archs)
    correction = LatencyCorrection.fit(predicted[:k], measured[:k])
    corrected = correction.apply(predicted)
    result = {"measured_on": OpenVinoProfiler(table.settings()).metadata(), "archs": len(archs),
              "calibration_archs": k, "before": agreement(predicted, measured),
              "correction": correction.to_dict(), "after_held_out": agreement(corrected[k:], measured[k:]),
              "predicted_ms": np.round(predicted, 4).tolist(), "corrected_ms": np.round(corrected, 4).tolist(),
              "measured_ms": np.round(measured, 4).tolist()}
    # what a run's check (`correct_for_this_machine`, "auto") would decide on its first networks
    result["a_run_corrects_it"] = bool(agreement(predicted[:k], measured[:k])["mape_pct"] > AGREEMENT_MAPE_PCT)
    logger.info("latency table against %d archs measured here: MAPE %.1f%%, %.0f%% within 10%%; corrected "
                "(fitted on %d): MAPE %.1f%%, %.0f%% within 10%%; a run here %s", len(archs),
                result["before"]["mape_pct"], 100 * result["before"]["within_10pct"], k,
                result["after_held_out"]["mape_pct"], 100 * result["after_held_out"]["within_10pct"],
                "corrects it (cost.correct: auto)" if result["a_run_corrects_it"] else "uses it as measured")
    return result


def correct_for_this_machine(space: SearchSpace, model: CostModel, mode: str, n_archs: int, seed: int,
                             run_dir) -> None:
    """Decide, once per run, whether the run's table (`model.table`) is corrected for this machine, and record it.

    `mode` is `cost.correct`. Unless "never", the table is checked against `n_archs` whole networks measured here
    (seconds): host metadata cannot tell that a table fits this machine, since machines of one kind differ by
    several times in speed. "auto" corrects it by a fitted `LatencyCorrection` when its error there exceeds
    `AGREEMENT_MAPE_PCT`, "always" whatever its error. The decision and the figures go to the run directory's
    latency_correction.json and the log; a resumed run reads them back instead of measuring again, so every
    latency of a run comes from one model.
    """
    if load_run_correction(model, run_dir):
        return
    record: dict = {"table": model.name, "mode": mode, "applied": False}
    device = model.table.settings().device
    if mode == "never":
        logger.info("latency table %s used as measured (cost.correct=never)", model.name)
    elif not _device_here(device):
        record["measured_elsewhere"] = {"device": device}
        logger.warning("latency table %s was measured on OpenVINO device %s, which this machine lacks: it is used "
                       "as measured, unchecked", model.name, device)
    else:
        foreign = model.table.foreign_fields(OpenVinoProfiler(model.table.settings()).metadata())
        archs = space.spread_sample(n_archs, RunRandom(seed).numpy("lut_correction.archs"))
        predicted, measured = _predicted(space, model, archs), measure_here(space, model.table, archs)
        before = agreement(predicted, measured)
        record.update(measured_elsewhere=foreign, before=before, measured_ms=np.round(measured, 4).tolist())
        where = f"measured elsewhere ({foreign})" if foreign else "measured on a machine like this one"
        if mode == "always" or before["mape_pct"] > AGREEMENT_MAPE_PCT:
            model.correction = LatencyCorrection.fit(predicted, measured)
            corrected = model.correction.apply(predicted)
            record.update(applied=True, correction=model.correction.to_dict(), after=agreement(corrected, measured))
            logger.warning("latency table %s, %s: on %d networks measured here its error is %.1f%% (MAPE); "
                           "corrected to %.3g x table + %.4f ms (error %.1f%% on the same networks)", model.name,
                           where, len(archs), before["mape_pct"], model.correction.scale,
                           model.correction.offset_ms, record["after"]["mape_pct"])
        else:
            logger.info("latency table %s, %s: on %d networks measured here its error is %.1f%% (MAPE, at most "
                        "%g%%): used as measured", model.name, where, len(archs), before["mape_pct"],
                        AGREEMENT_MAPE_PCT)
    atomic_write_text(Path(run_dir.path) / CORRECTION_FILE, json.dumps(record, indent=1) + "\n")


def measured_beside_predicted(ctx: SearchContext, records: list[Candidate]) -> dict[str, float]:
    """Arch key -> end-to-end latency (ms) of each of the candidates `records` measured on this machine, for a run
    whose cost model is a table of a device this machine has ({} otherwise). Journaled in checkpoint/measured.jsonl
    (read by the report; `measured_latencies`), so a resumed run measures nothing twice."""
    model = ctx.cost_model
    if not records or not model.is_measured or not _device_here(model.table.settings().device):
        return {}
    journal = EvaluationJournal(measured_journal(ctx.run_dir))
    done = measured_latencies(ctx.run_dir)
    keys = [arch_key(c.arch) for c in records]
    todo = {key: c.arch for key, c in zip(keys, records) if key not in done}
    if todo:
        measured = measure_here(ctx.space, model.table, list(todo.values()))
        for key, ms in zip(todo, measured):
            done[key] = round(float(ms), 4)
            journal.append({"key": key, "measured_ms": done[key]})
        logger.info("measured %d finalised archs end to end on this machine (%s)", len(todo), model.name)
    return {key: done[key] for key in keys}


def measured_journal(run_dir) -> Path:
    return Path(run_dir.checkpoint_dir) / "measured.jsonl"


def measured_latencies(run_dir) -> dict[str, float]:
    """Arch key -> the latency measured by `measured_beside_predicted` ({} when nothing was measured)."""
    return {r["key"]: r["measured_ms"] for r in EvaluationJournal(measured_journal(run_dir)).load()}


def _device_here(device: str) -> bool:
    return device in openvino().Core().available_devices


def read_correction_record(run_dir) -> dict | None:
    """The run's latency_correction.json (None when the run has not decided yet); RunDirError when damaged."""
    path = Path(run_dir.path) / CORRECTION_FILE
    if not path.exists():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        needed = ("mode", "applied") + (("correction", "before", "after") if record.get("applied") else ())
        missing = [k for k in needed if k not in record]
        if missing:
            raise KeyError(", ".join(missing))
        if record["applied"]:
            LatencyCorrection(**record["correction"])
        return record
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
        raise RunDirError(f"{path} is damaged ({exc!r}); delete it to measure the correction again") from exc


def load_run_correction(model: CostModel, run_dir) -> bool:
    """Apply the correction a run recorded in latency_correction.json (if it applied one) to `model`, the run's
    table; False when the run has not decided yet (no such file)."""
    record = read_correction_record(run_dir)
    if record is not None and record["applied"]:
        model.correction = LatencyCorrection(**record["correction"])
    return record is not None


def plot_validation(result: dict, path: Path) -> None:
    """Predicted against measured latency, as measured and corrected (held-out archs marked), with the +-10 %
    band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measured = np.array(result["measured_ms"])
    k = result["calibration_archs"]
    fig, ax = plt.subplots(figsize=(5.5, 5))
    ax.scatter(measured, result["predicted_ms"], s=14, c="tab:gray", label=(
        f"table as measured (MAPE {result['before']['mape_pct']:.1f}%)"))
    corrected = np.array(result["corrected_ms"])
    ax.scatter(measured[:k], corrected[:k], s=18, marker="x", c="tab:blue", label="corrected, fitted on these")
    ax.scatter(measured[k:], corrected[k:], s=16, c="tab:orange", label=(
        f"corrected, held out (MAPE {result['after_held_out']['mape_pct']:.1f}%, "
        f"{100 * result['after_held_out']['within_10pct']:.0f}% within 10%)"))
    lo, hi = measured.min() * 0.8, measured.max() * 1.2
    line = np.array([lo, hi])
    ax.plot(line, line, "k-", lw=0.8)
    ax.fill_between(line, line * 0.9, line * 1.1, color="k", alpha=0.08, label="+-10%")
    ax.set(xlabel="measured end to end (ms)", ylabel="predicted (ms)", xlim=(lo, hi))
    ax.set_title(f"{Path(result.get('table', 'table')).name}\non {result['measured_on'].get('device_name', '?')}",
                 fontsize=9)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
