"""Programs that call the built-in kernels, for python -m triton_sweep.capture."""
