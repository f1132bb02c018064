"""The runner. The commands a user types are the modules here (`python -m runners.sweep`, `.export`,
`.compare`, `.plot`, `.merge`); what they use is grouped by role: `engine/` plans trials and runs them
(workers, compile pool, scheduler, search, finalists), `measure/` times and checks one call on one device,
`results/` stores, reports and logs what was measured, and `benchmarks/` holds GPU benchmarks of the tool
itself (they print BENCHMARKS.md's tables; not part of the installed package)."""
