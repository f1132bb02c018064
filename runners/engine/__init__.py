"""What runs a sweep: the job and its phases, the scheduler and its parts, the compile pool, the trial
workers (one process per GPU) and the processes they run in; what a multirun whose jobs run apart adds
to Hydra (hydra_jobs). What a sweep is lives in runners/model/."""
