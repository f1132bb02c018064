"""Comparing runs: the between-run rule, two sides matched and judged, and the reports compare and revalidate
print."""
