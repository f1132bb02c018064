"""The results store: what was measured, kept crash-safe and read back whole or not at all."""
