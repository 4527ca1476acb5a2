"""`python -m nas.cli ...`: the `vpunas` command."""
import sys

from . import main

sys.exit(main())
