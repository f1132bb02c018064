"""The tests of model."""
