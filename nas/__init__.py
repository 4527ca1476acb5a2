"""NAS machinery: strategies, supernet training, Pareto analysis, reports, export, run directories, the CLI."""
