"""Python imports this at startup in a program run by `python -m triton_sweep.capture` (its directory is first
on the program's PYTHONPATH): install the launch hook, then run the sitecustomize this one shadows, if
the environment has one."""
import importlib.util
import os
import sys

import triton_launch_hook

triton_launch_hook.install()

_here = os.path.dirname(os.path.abspath(__file__))
_rest = [entry for entry in sys.path if os.path.abspath(entry or ".") != _here]
for _entry in _rest:
    _path = os.path.join(_entry or ".", "sitecustomize.py")
    if os.path.isfile(_path):
        _spec = importlib.util.spec_from_file_location("_shadowed_sitecustomize", _path)
        _spec.loader.exec_module(importlib.util.module_from_spec(_spec))
        break
