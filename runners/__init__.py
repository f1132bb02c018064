"""Runners: trial planning, the trial worker, timing, store, W&B logging, export and the sweep CLI."""
