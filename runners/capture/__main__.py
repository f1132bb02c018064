"""`python -m runners.capture`: the command (runners/capture/command.py)."""
import sys

from runners.capture.command import main

sys.exit(main())
