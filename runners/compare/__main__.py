"""`python -m triton_sweep.compare`: the command (runners/compare/command.py)."""
import sys

from triton_sweep.compare.command import main

sys.exit(main())
