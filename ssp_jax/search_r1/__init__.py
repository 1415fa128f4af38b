"""The Search-R1 baseline: GRPO of the solver alone with the search tool on labeled questions,
rewarded by exact match, on the SSP training loop (docs/search_r1.md)."""
