"""`python -m runners.export`: the command (runners/export/command.py)."""
import sys

from runners.export.command import main

sys.exit(main())
