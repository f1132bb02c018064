"""What was measured, kept and shown: the results store (store), the end-of-sweep table (report), the W&B
runs (wandb_logger), the process that finishes a sweep off its critical path (finisher), and the lookup
code every exported module carries (export_runtime)."""
