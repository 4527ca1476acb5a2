"""NAS machinery of vpunas, in rooms (sub-packages) that import one way only, from the top down
(the import-linter contract in pyproject.toml; docs/architecture.md):

* `cli/`: the `vpunas` command line (`python -m nas.cli`), one module per group of subcommands.
* `run.py`: the orchestrator: a whole search run, and the probe set of a finished run.
* `reporting/`: candidates.csv, pareto.png, report.html, runs compared, fronts on several NPU generations.
* `export/`: deployable models of a run's archs (TorchScript, ONNX, OpenVINO), INT8 quantization.
* `ranking/`: how well the supernet ranks archs (the probe set, the accuracy predictor).
* `baselines/`: reference models scored beside the front (subnets, trained networks, the model zoo, their cache).
* `context.py`: `build_context`, a run's `SearchContext` built from its config.
* `config.py`: the run's config, read into the rooms' settings dataclasses.
* `strategies/`: the search strategies (evolution, random sampling, differentiable) and their registry.
* `training/`: supernet training, evaluation of archs with inherited weights, finalisation.
* `latency/`: latency tables checked and corrected against archs run on this machine.
* core: `records.py` (`Candidate`, `BaselineResult`: the records of a run's results, their one CSV reader and
  writer), `search_context.py` (`SearchContext`, what a run works with: task, search space, cost model, device,
  processes), `rundir.py` (the run directory, atomic writes), `runtime.py` (threads, signals, memory),
  `distributed.py` (torchrun processes), `pareto.py` (the Pareto front), `baseline_entries.py` (the config's
  `baselines:` entries, typed), `errors.py` (error types).
"""
