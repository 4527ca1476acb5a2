"""Latency lookup tables: per-block latencies measured on a device, saved as JSON with their metadata.

A network's latency is the sum of its blocks (stem, searched blocks, head), each looked up by its key: the
block choice, input shape and stride (see `hw_cost.Block`).
"""
from __future__ import annotations

import datetime as _dt
import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from .cost_model import Block, CostModel, CostModelError
from .profiler import MeasureSettings, OpenVinoProfiler
from .registry import register_cost_model

logger = logging.getLogger(__name__)

__all__ = ["LatencyTable", "LatencyCorrection", "LutCostModel", "collect_latency_table", "FORMAT_VERSION"]

FORMAT_VERSION = 1


class LatencyTable:
    """Block key -> measured latency statistics, plus `metadata` on how they were measured (device, runtime
    and version, precision, threads, date, repeats).

    An entry's `median_ms` is the block's share of a network's latency: its measured time minus the runtime's
    fixed per-inference cost (`OpenVinoProfiler.measure_block`). That fixed cost is paid once per network and
    recorded as `metadata["inference_overhead_ms"]`; a network's latency is the sum of its blocks plus it.
    """

    def __init__(self, entries: dict[str, dict] | None = None, metadata: dict | None = None):
        self.entries = dict(entries or {})
        self.metadata = dict(metadata or {})

    @classmethod
    def load(cls, path: str | Path) -> "LatencyTable":
        path = Path(path)
        if not path.is_file():
            raise CostModelError(f"latency table {path} not found (build one with 'vpunas lut collect CONFIG')")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise CostModelError(f"latency table {path} is not valid JSON: {exc}") from exc
        if not isinstance(data, dict) or data.get("format") != FORMAT_VERSION or not isinstance(data.get("entries"), dict):
            raise CostModelError(f"latency table {path} is not a vpunas LUT (format {FORMAT_VERSION} with 'entries')")
        for key, entry in data["entries"].items():
            if not isinstance(entry, dict) or not isinstance(entry.get("median_ms"), (int, float)):
                raise CostModelError(f"latency table {path}: entry {key!r} has no numeric median_ms")
        return cls(data["entries"], data.get("metadata", {}))

    def to_json(self) -> str:
        return json.dumps({"format": FORMAT_VERSION, "metadata": self.metadata,
                           "entries": dict(sorted(self.entries.items()))}, indent=1) + "\n"

    def settings(self) -> MeasureSettings:
        """How the table was measured: the settings a re-measurement on this machine uses."""
        meta = self.metadata
        return MeasureSettings(device=meta.get("device", "CPU"), precision=meta.get("precision", "f32"),
                               threads=int(meta.get("threads", 1)), warmup=int(meta.get("warmup", 20)),
                               repeats=int(meta.get("repeats", 100)))

    def foreign_fields(self, local: dict) -> dict:
        """The fields of where it was measured (host, device, runtime) in which the table differs from `local`
        (an `OpenVinoProfiler.metadata()`); empty when the table was measured here."""
        return {k: self.metadata.get(k) for k in MEASURED_WHERE if self.metadata.get(k) != local.get(k)}


#: metadata fields that say where a table was measured: entries from two such places do not mix
MEASURED_WHERE = ("host", "device", "device_name", "runtime_version", "precision", "threads")


@dataclass(frozen=True)
class LatencyCorrection:
    """A table moved to another machine: latency there = `scale` x the table's prediction + `offset_ms`.

    Fitted by least squares on whole networks measured on the new machine (`fit`): a faster or slower CPU scales
    every block alike, and a different per-inference cost shifts every network alike.
    """

    scale: float
    offset_ms: float

    @classmethod
    def fit(cls, predicted_ms: Sequence[float], measured_ms: Sequence[float]) -> "LatencyCorrection":
        predicted, measured = np.asarray(predicted_ms, dtype=float), np.asarray(measured_ms, dtype=float)
        if len(predicted) < 2 or np.ptp(predicted) <= 0:
            raise CostModelError("a latency correction needs at least two networks of different predicted latency")
        scale, offset = np.polyfit(predicted, measured, 1)
        if scale <= 0:  # measurements that contradict the table's ordering: keep its ordering, fit the level only
            scale, offset = float(np.mean(measured) / np.mean(predicted)), 0.0
        return cls(round(float(scale), 6), round(float(offset), 6))

    def apply(self, ms):
        """The corrected latency of a network the table predicts at `ms` (a number or an array)."""
        return self.scale * ms + self.offset_ms

    def to_dict(self) -> dict:
        return asdict(self)


class LutCostModel(CostModel):
    """Latency from a measured table. A block missing from the table is an error naming the key, unless
    `measure_missing` is set: then it is measured on the local device with the table's own settings and added.
    The one kind of cost model with a `table` and a `correction` (`CostModel`).

    Args:
        table: the measured latencies.
        name: recorded with every result (e.g. "lut:fmnist_openvino_cpu.json").
        measure_missing: measure unknown blocks on demand instead of failing.
        correction: applied to every latency (blocks scaled, the network's fixed cost shifted), e.g. for a table
            measured on another machine.
    """

    def __init__(self, table: LatencyTable, name: str = "lut", measure_missing: bool = False,
                 correction: LatencyCorrection | None = None):
        self.table, self.name, self.measure_missing, self.correction = table, name, measure_missing, correction
        self.dtype = "fp16" if table.metadata.get("precision") in ("f16", "bf16") else "uint8"
        self._profiler: OpenVinoProfiler | None = None

    @classmethod
    def from_file(cls, path: str, measure_missing: bool = False, **unused) -> "LutCostModel":
        if unused:
            raise CostModelError(f"a latency table takes no options {sorted(unused)}")
        return cls(LatencyTable.load(path), name=f"lut:{Path(path).name}", measure_missing=measure_missing)

    def _measure(self, block: Block) -> dict:
        if self._profiler is None:
            self._profiler = OpenVinoProfiler(self.table.settings())
        logger.info("measuring missing LUT entry %s", block.key)
        entry = self._profiler.measure_block(block.build(), block.input_shape)
        self.table.entries[block.key] = entry
        return entry

    def latency_ms(self, blocks: Sequence[Block]) -> float:
        overhead = float(self.table.metadata.get("inference_overhead_ms", 0.0))
        if self.correction is not None:
            overhead = self.correction.apply(overhead)
        return float(np.sum(self.block_latencies_ms(blocks))) + overhead

    def check_covers(self, blocks: Sequence[Block]) -> None:
        keys = {b.key for b in blocks}
        missing = sorted(keys - set(self.table.entries))
        if missing and not self.measure_missing:
            raise CostModelError(f"{self.name} has no entry for {len(missing)} of the space's {len(keys)} blocks "
                                 f"(e.g. {missing[0]!r}): it was collected for another space; collect one "
                                 "('vpunas lut collect CONFIG') or set cost.measure_missing: true")

    def block_latencies_ms(self, blocks: Sequence[Block]) -> np.ndarray:
        out = np.empty(len(blocks))
        for i, block in enumerate(blocks):
            entry = self.table.entries.get(block.key)
            if entry is None:
                if not self.measure_missing:
                    raise CostModelError(f"{self.name} has no entry {block.key!r}; re-collect the table for this "
                                         "space ('vpunas lut collect CONFIG') or set cost.measure_missing: true")
                entry = self._measure(block)
            out[i] = entry["median_ms"]
        return out if self.correction is None else out * self.correction.scale


register_cost_model("lut", table=True)(LutCostModel.from_file)  # specs "lut:<table.json>"


def collect_latency_table(blocks: Sequence[Block], network_input_shape, settings: MeasureSettings,
                          table: LatencyTable | None = None, on_entry: Callable[[LatencyTable], None] | None = None,
                          progress: bool = True) -> LatencyTable:
    """Measure every block not yet in `table` (resumable: pass the partial table back in), and the fixed
    per-inference cost on the network's input.

    `on_entry(table)` runs after each new entry so the caller can save progress.
    """
    from tqdm import tqdm

    profiler = OpenVinoProfiler(settings)
    table = table or LatencyTable()
    meta = profiler.metadata()
    # a table continues only where it was measured and as it was: entries of two machines do not mix
    differs = {k: table.metadata.get(k) for k in (*MEASURED_WHERE, "repeats") if table.metadata.get(k) != meta[k]}
    if table.entries and differs:
        raise CostModelError(f"the existing table was measured elsewhere or with other settings ({differs}); "
                             "write to a new file")
    table.metadata.update(meta)
    table.metadata.setdefault("date", _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    if "inference_overhead_ms" not in table.metadata:
        table.metadata["inference_overhead_ms"] = round(profiler.inference_overhead_ms(network_input_shape), 6)
        table.metadata["network_input_shape"] = list(network_input_shape)
    unique = {b.key: b for b in blocks}
    todo = [b for key, b in unique.items() if key not in table.entries]
    logger.info("latency table: %d blocks, %d to measure", len(unique), len(todo))
    for block in tqdm(todo, desc="LUT", unit="block", disable=not progress, dynamic_ncols=True):
        table.entries[block.key] = profiler.measure_block(block.build(), block.input_shape)
        if on_entry is not None:
            on_entry(table)
    return table
