"""triton-sweep's Hydra launchers (hydra/launcher=local, slurm): hydra-submitit-launcher's, made to wait
for every job and to give each local job GPUs of its own. Hydra accepts launcher classes only from the
hydra_plugins namespace package, hence this package."""
