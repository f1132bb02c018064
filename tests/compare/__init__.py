"""The tests of compare."""
