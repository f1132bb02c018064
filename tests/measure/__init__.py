"""The tests of measure."""
