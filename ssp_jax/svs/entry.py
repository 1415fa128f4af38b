"""The SvS game as `ssp-jax train`, `eval` and `plot` see it (ssp_jax/run/games.py)."""
from __future__ import annotations

from ssp_jax.run.games import GameEntry

GAME = GameEntry(
    validate="ssp_jax.svs.validate:validate_config",
    train="ssp_jax.svs.trainer:train",
    eval="ssp_jax.svs.eval:run_cli",
    plot_keys=("oqa/accuracy", "oqa/boxed_rate", "oqa/under_performing",
               "oqa/all_correct_rate", "oqa/none_correct_rate", "oqa/response_len",
               "vps/valid_rate", "vps/reward_mean", "spa/accuracy", "svs/skipped",
               "svs/skipped_total", "loss", "pg_loss", "entropy", "grad_norm", "time/step"))
