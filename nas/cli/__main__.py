"""`python -m nas.cli ...`: the `vpunas` command."""
import sys

from . import command

sys.exit(command())
