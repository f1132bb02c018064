"""`python -m triton_sweep.capture`: the command (runners/capture/command.py)."""
import sys

from triton_sweep.capture.command import main

sys.exit(main())
