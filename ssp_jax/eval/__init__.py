"""Evaluation on QA benchmarks (the paper's Table 1): data loading, the runner, the report."""
from ssp_jax.eval.config import get_eval_config
