"""The hook `python -m triton_sweep.capture` puts on the program's PYTHONPATH (this directory, not the
package: sitecustomize.py and triton_launch_hook.py import as top-level modules there)."""
