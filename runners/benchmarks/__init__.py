"""GPU benchmarks of the tool itself, not features of it: each prints a table BENCHMARKS.md records
(`python -m runners.benchmarks.<module>` from the repository root; `.ci/gpu` names the steps). They are
left out of the installed package."""
