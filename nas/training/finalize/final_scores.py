"""Scoring finalised archs: the better of trained and inherited weights on the whole val split, their test scores,
INT8 scores, and where their weights are kept."""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Sequence

import torch.nn as nn

from ...records import Candidate, FinalScores
from ...rundir import EvaluationJournal, load_checkpoint
from ...search_context import SearchContext
from ..evaluation import ArchEvaluator, fed_from_cpu, scores_on_test

logger = logging.getLogger(__name__)


def final_weights_path(run_dir, arch_id: int) -> Path:
    return run_dir.checkpoint_dir / "final" / f"arch{arch_id}.pt"


def load_final_weights(run_dir, arch_id: int, net: nn.Module) -> bool:
    """Load arch `arch_id`'s finalised weights into `net` (its extracted subnet); False when it has none."""
    path = final_weights_path(run_dir, arch_id)
    if not path.exists():
        return False
    net.load_state_dict(load_checkpoint(path))
    return True


def val_metric(task, model: nn.Module) -> float:
    """The metric on the whole val split."""
    return round(float(task.evaluate(fed_from_cpu(model), "val", all_images=True)), 4)


def better_of(task, trained: nn.Module, inherited: nn.Module,
              epochs: float) -> tuple[nn.Module, FinalScores, float | None]:
    """Whichever of the trained net (trained for `epochs`) and the arch's inherited subnet (recalibrated) scores
    better on the whole val split, with its scores (val, test; 0 epochs for the inherited subnet); the third
    value is the trained net's val metric when the inherited subnet won, else None. Finalisation so never hands
    over an arch worse than its inherited weights made it (too short a schedule, a weak teacher, too high a
    learning rate)."""
    trained_val, inherited_val = val_metric(task, trained), val_metric(task, inherited)
    keep = inherited_val > trained_val
    net = inherited if keep else trained
    scores = FinalScores(inherited_val if keep else trained_val, scores_on_test(task, net),
                         0 if keep else round(epochs, 2))
    return net, scores, trained_val if keep else None


def int8_scores(ctx: SearchContext, chosen: Sequence[Candidate], keys: Sequence[str],
                evaluator: ArchEvaluator) -> dict[str, float]:
    """Arch key -> test metric of the finalised arch quantized to INT8; journaled, so a restart scores no arch
    twice."""
    from ...export.quantize import int8_metric  # imported when a run asks for INT8 scores

    journal = EvaluationJournal(ctx.run_dir.checkpoint_dir / "finalized_int8.jsonl")
    scored = {r["key"]: r for r in journal.load()}
    started = time.perf_counter()
    for candidate, key in zip(chosen, keys):
        if key not in scored:
            net = evaluator.supernet.extract(candidate.arch).cpu()  # INT8 models run on the CPU
            load_final_weights(ctx.run_dir, candidate.id, net)
            scored[key] = {"key": key, "id": candidate.id, "int8": round(int8_metric(net.eval(), ctx.task)[1], 4)}
            journal.append(scored[key])
    logger.info("INT8 test %s of %d finalised archs in %.1f s", ctx.task.metric, len(keys),
                time.perf_counter() - started)
    return {key: scored[key]["int8"] for key in keys}

