"""The tests of capture."""
