"""The tests of kernels."""
