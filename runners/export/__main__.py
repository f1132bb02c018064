"""`python -m triton_sweep.export`: the command (runners/export/command.py)."""
import sys

from triton_sweep.export.command import main

sys.exit(main())
