"""GPU benchmarks of the tool itself, not features of it: each prints a table BENCHMARKS.md records
(`python -m triton_sweep.benchmarks.<module>` from the repository root; `.ci/gpu` names the steps). They are
left out of the installed package."""
