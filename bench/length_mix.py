"""Sample SSP-shaped trajectories from a committed length mix (bench/length_mix_*.json).

Each trajectory is (role, prompt tokens, response spans): the response alternates model turns
(loss tokens) and observations (loss-masked), as the rollout engine writes them. Used by
`bench/train_step.py --length-mix` to build the same trajectories in the padded and the
packed layout.
"""
from __future__ import annotations

import json
import os
from typing import Optional

import numpy as np

from ssp_jax.ssp.game import ROLES
from ssp_jax.types import Trajectory

HERE = os.path.dirname(os.path.abspath(__file__))


def load_mix(name_or_path: str) -> dict:
  """A mix by name (bench/length_mix_<name>.json) or by path."""
  path = name_or_path
  if not os.path.exists(path):
    path = os.path.join(HERE, f"length_mix_{name_or_path}.json")
  if not os.path.exists(path):
    raise FileNotFoundError(f"--length-mix {name_or_path!r}: no such file or bench/"
                            f"length_mix_{name_or_path}.json")
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def _uniform(rng, lo_hi, scale):
  lo, hi = lo_hi
  return max(1, int(round(rng.integers(lo, hi + 1) * scale)))


def sample_trajectories(mix: dict, n: int, *, vocab: int, seed: int = 0, scale: float = 1.0,
                        max_len: Optional[int] = None) -> tuple[list[Trajectory], list[int]]:
  """n trajectories (roles in the mix's fractions, in a fixed order) and their role ids.

  scale multiplies every length (a CPU smoke test uses ~1/16); max_len clips the total."""
  rng = np.random.default_rng(seed)
  roles = mix["roles"]
  names = sorted(roles)
  counts = {r: int(round(n * roles[r]["fraction"])) for r in names}
  counts[names[-1]] += n - sum(counts.values())
  trajs, role_ids = [], []
  for r in names:
    spec = roles[r]
    for _ in range(counts[r]):
      prompt = rng.integers(1, vocab, _uniform(rng, spec["prompt_tokens"], scale)).tolist()
      k = int(rng.choice(len(spec["searches"]), p=np.asarray(spec["searches"]) /
                         np.sum(spec["searches"])))
      mask: list[int] = []
      for _ in range(k):
        mask += [1] * _uniform(rng, spec["turn_tokens"], scale)
        mask += [0] * _uniform(rng, spec["observation_tokens"], scale)
      mask += [1] * _uniform(rng, spec["final_tokens"], scale)
      if max_len is not None:
        mask = mask[:max(0, max_len - len(prompt))]
      resp = rng.integers(1, vocab, len(mask)).tolist()
      trajs.append(Trajectory(prompt_ids=prompt, response_ids=resp, loss_mask=mask,
                              logprobs=[-8.0] * len(mask)))
      role_ids.append(ROLES.index(r))
  return trajs, role_ids
