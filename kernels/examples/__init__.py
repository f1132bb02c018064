"""Programs that call the built-in kernels, for python -m runners.capture."""
