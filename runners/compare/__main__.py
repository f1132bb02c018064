"""`python -m runners.compare`: the command (runners/compare/command.py)."""
import sys

from runners.compare.command import main

sys.exit(main())
