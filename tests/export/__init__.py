"""The tests of export."""
