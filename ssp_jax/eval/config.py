"""The `config.eval` section: which datasets to evaluate on, how many questions, how often."""
from __future__ import annotations

import ml_collections


def get_eval_config() -> ml_collections.ConfigDict:
  """Defaults for `config.eval`; config files override fields (`--config.eval.limit=100`).

  Fields:
    datasets: name -> data spec (a FlashRAG JSONL path, `builtin:wiki_sample`, or
      `tfds:BUILDER[@SPLIT]`; see `ssp_jax.eval.data`). Names nq, triviaqa, popqa, hotpotqa,
      2wikimultihopqa, musique and bamboogle fill the paper's Table 1 columns.
    limit: questions per dataset, sampled deterministically with `seed` (the paper: 500; Bamboogle
      has 125 and is used whole). 0 keeps every question.
    seed: subsampling seed.
    every_steps: run the evaluation inside training every N steps (0: never); metrics are logged
      as `val/{dataset}/{metric}`.
    at_start: also evaluate the starting policy (after the warm start, if any) as step 0 of a
      fresh run, so the in-training curve has its starting point (not repeated on resume).
    batch_size: questions per rollout-engine call (0: a whole dataset per call; the engine decodes
      `rollout.batch_size` of them at a time and refills slots as rollouts finish).
    max_new_tokens: token budget of one solver rollout (0: the rollout config's value).
    tfds_data_dir: TFDS data directory for `tfds:` specs ("" = the TFDS default).
    judge: "" reports EM and F1 only; "ssp" also reports the `judge` metric (the paper's headline
      number) with the judge that the SSP solver reward uses (`config.ssp.judge`). EM
      short-circuits the judge: an exact match counts as correct without a judge call.
  """
  c = ml_collections.ConfigDict()
  c.datasets = ml_collections.ConfigDict({"wiki_sample": "builtin:wiki_sample"})
  c.limit = 500
  c.seed = 0
  c.every_steps = 0
  c.at_start = False
  c.batch_size = 0
  c.max_new_tokens = 0
  c.tfds_data_dir = ""
  c.judge = ""
  return c
