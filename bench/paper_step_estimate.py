"""The paper's SSP step at 7B, estimated from measured pieces; prints one JSON object.

  python bench/paper_step_estimate.py                     # the defaults below
  python bench/paper_step_estimate.py --rollout-tok-s 9000 --update-mfu 0.55

The paper's step (Qwen2.5-7B): 256 proposer trajectories (n = 1) and 256 questions x 5 solver
trajectories (1,280), a RAG check of each proposed question, then one update over all 1,536.
Nothing here runs a model: the step is built from

  * token counts: the expected lengths of `bench/length_mix_paper.json` (a stated model of SSP
    trajectories, not a measurement: prompt, model turns, observations per role);
  * measured rates (each default names the bench/RESULTS.md section it comes from; pass your
    own with the flags):
      rollout   7B multi-turn policy tok/s on one H200, 256 slots, the paged cache (the
                multi-turn default), warm (10,421; "7B multi-turn, and the step after
                kv_pool_reuse", 2026-12-05; the dense cache's 4,927 of 2026-12-01 before)
      prefill   7B prefill at 620 TFLOP/s (same section: 256 x 128 tokens in 0.81 s)
      update    packed real-token MFU 0.473 of 797 TFLOP/s at 1.5B on the paper length mix
                with the output projection at every position (a utilisation: every counted
                FLOP ran; "Issue 26 on the H200 (2026-12-04)"), assumed to hold at 7B;
      decode    7B single-turn decode tok/s at 256 rows for the RAG check's answers (30,859;
                "The kernels' direct output, the knobs and the head in the loop", 2026-12-07);
  * the FLOPs of a 7B token: 2 x 7.07e9 forward (matmul parameters, embedding lookup excluded),
    an update pass 3x forward (forward + backward), plus one old-log-prob and one reference
    forward over every token; with `--logprob-positions loss` (rl.logprob_positions, the
    default) the output projection (0.545e9 of them) only at the policy (loss) tokens.

Projections, with their assumptions in the output:
  * 8 H200 (one host): rollouts split 8 ways at the one-GPU rate (each GPU holds a full copy of
    the weights: data-parallel decoding, no communication in the loop); the update FSDP over 8
    at `--scale-eff` (default 0.9) of 8x the one-GPU rate.
  * v5p-64 (32 chips, 459 TFLOP/s bf16 and 2.76 TB/s HBM each): decoding scaled by HBM bandwidth
    per chip (decode is bound by reading weights and cache), prefill and update by FLOP/s at the
    same MFU, over 32 chips at `--scale-eff`.
One H200 cannot hold the 7B update (fp32 params + Adam state = 16 bytes x 7.6e9 = 122 GB before
activations): its update line is compute time only, printed to compare, not a runnable step.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
H200_PEAK = 797e12       # bf16 matmul FLOP/s measured on the lent H200 (the device notes)
H200_HBM = 4.8e12
V5P_PEAK, V5P_HBM, V5P_CHIPS = 459e12, 2.765e12, 32
PARAMS_7B = 7.07e9       # matmul parameters a token (Qwen2.5-7B less the embedding lookup)
HEAD_7B = 3584 * 152_064  # of which the output projection (hidden x vocabulary)


def _mean(lo_hi) -> float:
  return (lo_hi[0] + lo_hi[1]) / 2.0


def role_tokens(spec: dict) -> dict:
  """Expected prompt, model (loss) and observation tokens of one trajectory of a role."""
  p = spec["searches"]
  searches = sum(k * pk for k, pk in enumerate(p)) / sum(p)
  model = searches * _mean(spec["turn_tokens"]) + _mean(spec["final_tokens"])
  return {"searches": searches, "prompt": _mean(spec["prompt_tokens"]), "model": model,
          "observation": searches * _mean(spec["observation_tokens"])}


def estimate(a: argparse.Namespace) -> dict:
  with open(os.path.join(HERE, "length_mix_paper.json"), encoding="utf-8") as f:
    mix = json.load(f)["roles"]
  counts = {"proposer": a.proposers, "solver": a.proposers * a.group}
  per = {r: role_tokens(mix[r]) for r in counts}
  model_tok = sum(counts[r] * per[r]["model"] for r in counts)
  obs_tok = sum(counts[r] * per[r]["observation"] for r in counts)
  all_tok = sum(counts[r] * (per[r]["prompt"] + per[r]["model"] + per[r]["observation"])
                for r in counts)
  flop_fwd = 2 * PARAMS_7B
  # rollouts: the measured multi-turn rate already includes observation prefill and refills
  rollout_s = model_tok / a.rollout_tok_s
  # RAG check: one no-search answer per proposed question from ~5 trajectories' documents
  rag_prefill_tok = a.proposers * a.rag_prompt_tokens
  rag_s = rag_prefill_tok * flop_fwd / a.prefill_flop_s + a.rag_answer_tokens / a.decode_step_tok_s
  # train fwd+bwd, old log-prob, reference; the head at every token or at the loss tokens only
  head_tok = all_tok if a.logprob_positions == "all" else model_tok
  update_flop = (all_tok * 2 * (PARAMS_7B - HEAD_7B) + head_tok * 2 * HEAD_7B) * (3 + 2)
  update_s = update_flop / (a.update_mfu * H200_PEAK)
  one = {"rollout_s": rollout_s, "rag_check_s": rag_s, "update_s_compute_only": update_s,
         "step_s": rollout_s + rag_s + update_s}
  eight = {"rollout_s": rollout_s / 8, "rag_check_s": rag_s / 8,
           "update_s": update_s / (8 * a.scale_eff)}
  eight["step_s"] = sum(eight.values())
  bw, fl = V5P_HBM / H200_HBM, V5P_PEAK / H200_PEAK
  pod = {"rollout_s": rollout_s / (V5P_CHIPS * bw), "rag_check_s": rag_s / (V5P_CHIPS * fl),
         "update_s": update_s / (V5P_CHIPS * fl * a.scale_eff)}
  pod["step_s"] = sum(pod.values())
  rnd = lambda d: {k: round(v, 1) for k, v in d.items()}
  return {
      "bench": "paper_step_estimate", "model": "qwen2.5-7b",
      "trajectories": counts, "tokens_per_trajectory": {r: {k: round(v, 1) for k, v in
                                                           per[r].items()} for r in per},
      "policy_tokens": round(model_tok), "observation_tokens": round(obs_tok),
      "update_tokens": round(all_tok), "update_pflop": round(update_flop / 1e15, 1),
      "one_h200": rnd(one), "eight_h200": rnd(eight), "v5p_64": rnd(pod),
      "inputs": {"rollout_policy_tok_s": a.rollout_tok_s, "prefill_flop_s": a.prefill_flop_s,
                 "decode_step_tok_s": a.decode_step_tok_s, "update_mfu": a.update_mfu,
                 "logprob_positions": a.logprob_positions,
                 "scale_eff": a.scale_eff, "rag_prompt_tokens": a.rag_prompt_tokens,
                 "rag_answer_tokens": a.rag_answer_tokens, "h200_peak_flop_s": H200_PEAK},
      "assumptions": [
          "token counts are the expectations of bench/length_mix_paper.json (a stated model)",
          "the 7B multi-turn rate at 256 slots (1,024-token responses) holds for the paper mix; "
          "that run spliced a 512-token observation about every 256 policy tokens (about 2 "
          f"observation tokens a policy token), the mix has {obs_tok / model_tok:.1f}, so the "
          "rollout time is, if anything, low",
          "the 1.5B packed update MFU holds at 7B (FSDP on 8 GPUs at scale_eff)",
          "8 H200: rollouts data-parallel with no loss; v5p: decode scales with HBM bandwidth, "
          "prefill and update with bf16 FLOP/s, over 32 chips at scale_eff",
          "one H200 cannot hold the 7B update state (122 GB fp32 params + Adam): compute only"],
  }


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--proposers", type=int, default=256)
  p.add_argument("--group", type=int, default=5, help="solver trajectories per question")
  p.add_argument("--rollout-tok-s", type=float, default=10421.0,
                 help="7B multi-turn policy tok/s on one H200 (measured, 256 slots, paged)")
  p.add_argument("--prefill-flop-s", type=float, default=620e12)
  p.add_argument("--decode-step-tok-s", type=float, default=30859.0,
                 help="7B single-turn decode tok/s at 256 rows (the RAG check's answers)")
  p.add_argument("--update-mfu", type=float, default=0.473,
                 help="update utilisation: FLOPs that ran / (time x 797 TFLOP/s)")
  p.add_argument("--logprob-positions", choices=("loss", "all"), default="loss",
                 help="rl.logprob_positions: the output projection at the loss tokens only "
                      "(default) or at every position")
  p.add_argument("--scale-eff", type=float, default=0.9)
  p.add_argument("--rag-prompt-tokens", type=int, default=2500,
                 help="verifier prompt: question + ~5 trajectories' documents (stated)")
  p.add_argument("--rag-answer-tokens", type=int, default=256 * 64)
  print(json.dumps(estimate(p.parse_args(argv))))
  return 0


if __name__ == "__main__":
  sys.exit(main())
