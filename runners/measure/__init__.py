"""Measurement of one call on one device: the correctness gate and the classification of failures (check)
on a trial's inputs (inputs), the timers (timing, cuda_timer, cupti_records, l2_flush) and their stop rule
(stop_rule), repetitions on buffers placed anew (repetitions), the row's metrics (metrics), and the
device's identity and measured ceilings (device)."""
