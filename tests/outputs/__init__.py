"""The tests of outputs."""
