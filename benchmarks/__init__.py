"""Sluice benchmarks: each measures its baseline in the same run and reports ratios."""
