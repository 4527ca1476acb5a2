"""The `vpunas` command line. Each subcommand lives in its own module; this one parses and reports errors.

A user's mistake (missing file, malformed config or model file, unknown model or device, invalid workload)
ends with one line on stderr and exit status 2, never a traceback.

Under torchrun (`nas.distributed`) only rank 0 logs at INFO and prints results; the other processes log warnings
and errors only.

The command line's modules import what a command needs when it runs, not at their top: `vpunas --help` and the
parsing of a command take a tenth of a second without torch, timm or the training code (several seconds with
them). These deferred imports are the package's only ones besides heavy third-party libraries.
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import warnings

from ..runtime import ignore_stop_signals, interrupt_on_stop_signals, interrupt_received, keep_freed_memory

__all__ = ["main", "command", "build_parser"]


def _user_errors() -> tuple[type[BaseException], ...]:
    """Exception types that mean bad input, not a bug: each package's own error class."""
    from hw_cost import CostModelError, LayerExtractionError
    from search_spaces import ArchError
    from tasks import DataError

    from ..errors import ConfigError, QuantizationError, RunDirError, TrainingDiverged

    return (ConfigError, RunDirError, TrainingDiverged, QuantizationError, CostModelError, LayerExtractionError,
            DataError, ArchError, FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)


class _OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line like every other error (the usage is one --help away)."""

    def error(self, message: str):
        self.exit(2, f"vpunas: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    from . import commands, cost_cli

    parser = _OneLineParser(prog="vpunas", description="Hardware-aware NAS for Intel VPU / NPU.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_search_parser(sub)
    commands.add_report_parser(sub)
    commands.add_export_parser(sub)
    commands.add_probe_parser(sub)
    commands.add_lut_parser(sub)
    cost_cli.add_cost_parser(sub)
    cost_cli.add_vpunn_parser(sub)
    return parser


def command() -> int:
    """The `vpunas` program: `main()` on the process's arguments, then the stop signals ignored while the
    interpreter exits (`ignore_stop_signals`)."""
    code = main()
    ignore_stop_signals()
    return code


def main(argv: list[str] | None = None) -> int:
    interrupt_on_stop_signals()  # first: building the parser already imports torch
    try:
        return _run_command(argv)
    except KeyboardInterrupt:
        print("vpunas: interrupted; finished work is saved (resume a search with --resume)", file=sys.stderr)
        return 130


def _run_command(argv: list[str] | None) -> int:
    parser = build_parser()
    # key=value overrides may come after options (`search CONFIG --out DIR a=1`), which argparse leaves over
    args, extra = parser.parse_known_args(argv)
    leftover_overrides = [a for a in extra if "=" in a and not a.startswith("-")]
    if hasattr(args, "overrides") and leftover_overrides:
        args.overrides = list(args.overrides) + leftover_overrides
        extra = [a for a in extra if a not in leftover_overrides]
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    keep_freed_memory()
    from ..distributed import Distributed, cleanup

    try:
        main_process = Distributed.from_environment().is_main
        level = logging.DEBUG if args.verbose else logging.INFO if main_process else logging.WARNING
        logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                            datefmt="%H:%M:%S")
        with contextlib.ExitStack() as quiet, warnings.catch_warnings():
            # torch 2.14 deprecates torch.jit, which TorchScript export and OpenVINO's converter call: nothing a
            # user of vpunas can act on, and a mistake must stay one line on stderr
            warnings.filterwarnings("ignore", message=r"`torch\.jit\.", category=FutureWarning)
            if not main_process:  # rank 0 prints the results
                quiet.enter_context(contextlib.redirect_stdout(quiet.enter_context(open(os.devnull, "w"))))
            code = int(args.handler(args) or 0)
        if interrupt_received():  # a library swallowed the KeyboardInterrupt and the work went on to its end
            raise KeyboardInterrupt
        return code
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        if interrupt_received():  # an error on the interrupt's way up: library code it cut short (OmegaConf's)
            raise KeyboardInterrupt from exc
        if args.verbose or not isinstance(exc, _user_errors()):
            raise
        print(f"vpunas: error: {exc}", file=sys.stderr)
        return 2
    finally:
        cleanup()
