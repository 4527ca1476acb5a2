"""The papers' comparison table from finished runs: searched archs against each baseline, at equal quality.

    .venv/bin/python scripts/paper_table.py RUN_DIR [SR_RUN_DIR]

For each baseline of each run (baselines.csv) prints, as a markdown table, the fastest searched arch (the finalised
archs, when the run has any) at least as good on the test split and its fps ratio
(`nas.reporting.report.baseline_matches`, the report's headline; PSNR runs also get the PSNR ratio), on the run's own
cost model; then, for the baselines trained from scratch (`standalone`, `reference`, `zoo`), the same on every NPU
generation (VPU 2.0 / 2.7 / 4.0 / NPU 5.0 by VPUNN) with the best arch at most as slow and its gain
(`nas.reporting.report.generation_matches`); then one sentence in the papers' form ("1.3x fps over MobileNetV2-1.4 and
2.2x over ResNet50-style at equal accuracy; 1.08x PSNR and 6x fps over EDSR") with our numbers
(`nas.reporting.report.paper_sentence`: like with like only, never a subnet on inherited weights).
"""
from __future__ import annotations

import argparse
import sys

from nas.config import NPU_GENERATIONS
from nas.reporting.report import baseline_matches, generation_lines, generation_matches, paper_sentence
from nas.reporting.report_page import load_run, training_note
from nas.rundir import RunDir

UNITS = {"top1": "top-1 (%)", "psnr": "PSNR (dB)"}


def run_table(run_dir: RunDir) -> tuple[list[str], str]:
    """A run's markdown table and its clause of the sentence."""
    view = load_run(run_dir)
    metric = view.metric
    matches = baseline_matches(view.candidates, view.baselines, metric)
    psnr = metric == "psnr"
    unit = UNITS.get(metric, metric)
    lines = [f"{run_dir.path.name}: test {unit}, latency on {view.cost_model}", "",
             f"| baseline | {unit} | latency (ms) | searched arch | {unit} | latency (ms) | fps ratio |"
             + (" PSNR ratio |" if psnr else ""),
             "|---|---|---|---|---|---|---|" + ("---|" if psnr else "")]
    for m in matches:
        found = m.arch_id is not None
        lines.append(f"| {m.title} | {m.figure:.2f} | {m.latency_ms:.4g} | "
                     + (f"{m.arch_id} | {m.arch_figure:.2f} | {m.arch_latency_ms:.4g} | {m.fps_ratio:.2f}x |"
                        if found else "none as good | | | |")
                     + ((f" {m.arch_figure / m.figure:.3f}x |" if found else " |") if psnr else ""))
    per_generation = generation_matches(view.candidates, view.baselines, metric, view.latency, NPU_GENERATIONS)
    if per_generation:
        lines += ["", f"{run_dir.path.name} per NPU generation (VPUNN), test {unit}; {training_note(view)}:", "",
                  *generation_lines(per_generation, metric)]
    return lines, paper_sentence(matches, metric) or "no baseline trained as long as the finalised archs"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", help="a finished classification run (or any run)")
    parser.add_argument("sr_run_dir", nargs="?", help="a finished super-resolution run")
    args = parser.parse_args(argv)
    clauses = []
    try:
        for path in filter(None, (args.run_dir, args.sr_run_dir)):
            lines, clause = run_table(RunDir(path))
            print("\n".join(lines) + "\n")
            clauses.append(clause)
    except (OSError, ValueError) as exc:  # a missing or damaged run directory
        print(f"paper_table: error: {exc}", file=sys.stderr)
        return 2
    print("Searched: " + "; ".join(clauses) + ".")
    return 0


if __name__ == "__main__":
    sys.exit(main())
