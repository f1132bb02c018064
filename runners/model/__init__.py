"""What a sweep is: its config, trials, plan, row record, search and finalists' rule, and where its kernel
comes from; no process code."""
