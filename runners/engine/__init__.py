"""The engine: a composed config becomes trials (trials, schema), search picks which run, and the scheduler
feeds them through the compile pool and one worker process per GPU (compile_pool, process, worker) to the
finalists' re-timing (finalists); launch holds what a multirun whose jobs run apart adds to Hydra."""
