"""What was measured, kept and shown: the results store (store), the end-of-sweep table (report), the W&B
runs (wandb_logger), the process that finishes a sweep off its critical path (finisher), the export of the
best configs (export/, with the lookup code every exported module carries), and how two runs are compared
(comparison, by the rule of between_runs)."""
