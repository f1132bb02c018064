"""Measurement of one call on one device: the correctness gate and the classification of failures (check),
the timer of record and its stop rule (timing), and the device's identity and measured ceilings (device)."""
