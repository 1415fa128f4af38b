"""The `rollout` config section (ml_collections): every knob of the sampler and the search loop."""
from __future__ import annotations

import ml_collections


def get_rollout_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  # --- batch and memory ---
  c.batch_size = 64             # decode slots = KV-cache rows; divisible by the data mesh axis
  c.max_prompt_tokens = 4096    # longer prompts keep their last tokens (meta["prompt_truncated"])
  c.max_response_tokens = 8192  # whole response incl. spliced observations (veRL's limit)
  c.cache_min_len = 512         # smallest cache bucket; the cache doubles as sequences grow, up
                                # to max_prompt_tokens + max_response_tokens (+ prefill_chunk)
  c.prefill_chunk = 512         # dense: longest chunk prefilled in one call (longer ones split)
  c.prefill_piece = 64          # paged: rows' pending tokens are prefilled in pieces of this
                                # many tokens, a row's pieces in one call (rollout/prefill.py)
  c.prefill_tokens = 4096       # paged: most tokens (pieces x prefill_piece) a prefill call
                                # computes; bounds its activations and attention scores
  c.prefill_attention = "auto"  # paged prefill's attention over the rows' slots: xla (scores
                                # stored in fp32, any backend) | cudnn (flash, no scores; GPU) |
                                # auto: cudnn on a GPU whose mesh splits no rows or heads,
                                # at bf16/fp16 compute; else xla
  c.steps_per_call = 256        # decode steps per jitted call (the host services rows between)
  c.decode_unroll = 1           # decode steps per while-loop iteration: each iteration ends
                                # with the loop's predicate read by the host (a GPU waits);
                                # steps past the loop's exit run gated, as no-ops
  c.decode_head = "xla"         # how a decode step projects to the vocabulary and draws: xla
                                # (the [B, V] fp32 logits, then the draw) | pallas (one kernel:
                                # the projection and the draw's block statistics, the logits
                                # never stored; sampling/head_pallas.py; no top-k / top-p)
  c.decode_matmul = "xla"       # the decode step's layer GEMMs: xla (XLA's dot; cuBLAS on GPUs)
                                # | pallas (sampling/gemm_pallas.py: Triton, K split over
                                # programs, the norms, bias, SiLU and residual adds inside;
                                # unsharded; 1.66x slower a step on one H100) | pallas_residual
                                # (only o and down as kernels; untimed in the loop; docs/rollout.md)
  c.refill_fraction = 0.125     # a call returns once this fraction of its rows has finished
  c.tail_min_batch = 16         # no prompt queued and at most half the slots in use: the batch
                                # halves (rows move to the first slots) down to this; 0 = never
  c.dtype = "bfloat16"          # compute dtype of the forward pass
  c.cache_dtype = "bfloat16"    # KV cache dtype
  c.decode_attention = "auto"   # auto: on a GPU with an unsplit mesh pallas (paged) or
                                # pallas_rope (dense), else einsum;
                                # dense: einsum (batched GEMMs) | reduce | cudnn | xla | pallas
                                # (fused kernel, sampling/dense_pallas.py); paged: gather (pure
                                # JAX, any backend) | pallas (fused kernel that also stores the
                                # new K/V, sampling/paged_pallas.py) | pallas_jax (JAX's
                                # library kernel after scattering the K/V). pallas_rope (both
                                # layouts): pallas that also applies RoPE to the raw q/k/v
                                # projection (fused weights, no q/k norm; else pallas)
  # --- KV layout (docs/rollout.md, "Paged KV cache") ---
  c.kv_layout = "auto"          # dense: [L, B, K, S, H] rows | paged: a shared pool of pages |
                                # auto: paged where decode attention is the Pallas kernels (a
                                # GPU, unsplit mesh), else dense
  c.page_size = 64              # paged: token slots per page
  c.kv_max_tokens = 0           # paged: pool cap in tokens (all rows together); 0 = batch_size x
                                # (max_prompt + max_response + prefill_chunk), never preempts.
                                # Smaller: more slots fit; a row short of pages waits, and when
                                # no row can go on the youngest is preempted and recomputed
  c.kv_pool = "fixed"           # paged: fixed = sized once per call for its rows at their
                                # longest (capped by kv_max_tokens), one shape, few compiles |
                                # grow = from batch_size x cache_min_len, doubling as rows need
                                # (less memory when rows end well short of their budgets)
  c.kv_pool_reuse = True        # paged, fixed pool: a call that fits a pool an earlier call of
                                # the same slots compiled for takes that pool (no recompile,
                                # no more memory than that call held); False: each call's own
  c.compile_ahead = -1          # paged, fixed pool: compile the call's prefill and decode
                                # programs on this many host threads before they are needed
                                # (rollout/ahead.py); -1 = auto: up to 4 on a GPU/TPU, off on a
                                # CPU (the compiles would take the cores the run computes on);
                                # 0 = off
  # --- sampling ---
  c.temperature = 1.0           # 0 = greedy; recorded log-probs are log_softmax(logits / T)
  c.top_p = 1.0                 # 1 = off
  c.top_k = 0                   # 0 = off
  c.sampler = "inverse_cdf"     # how a sampled token is drawn (same distribution): inverse_cdf
                                # (one uniform number a row, two passes over the logits) |
                                # gumbel (jax.random.categorical, a random number per vocabulary
                                # entry: 0.49 against 0.31 ms a draw of 256 rows x 151,936 on
                                # an H200; the random stream of runs before 2026-12-04)
  c.stop = ("</search>", "</answer>", "</question>")  # stop strings; eos/end-of-turn ids always stop
  # --- search tool ---
  c.use_search = True           # tools on: "</search>" calls the retriever (else it just stops)
  c.search_open = "<search>"    # the query is the text between the last search_open and
  c.search_close = "</search>"  # search_close (a stop string that triggers the retriever)
  c.max_searches = 10           # per trajectory; the next "</search>" ends it as max_searches
  c.max_obs_tokens = 512        # per observation (docs are cut, the closing tag is kept); 0 =
                                # uncut. A difference: the original (veRL + SGLang) splices the
                                # top-k documents untruncated (only the response budget caps them)
  c.topk = 3                    # documents per search
  c.search_timeout_s = 60.0     # a slower retriever call fails (observation says so, counted)
  return c


def check_rollout_config(c: ml_collections.ConfigDict) -> None:
  """RangeError naming the first numeric field of the `rollout` section out of its valid range
  (a negative temperature, no decode slot, a search timeout of 0 would run, or fail every search,
  without a word). `top_k=0` is valid: it means no top-k cut (`ssp_jax.sampling.methods`).
  Called by `ssp_jax.ssp.validate.check_sections` before any model is loaded."""
  from ssp_jax.config_ranges import check_range
  r = lambda name, *a, **k: check_range("rollout", c, name, *a, **k)
  r("batch_size", 1)
  r("max_prompt_tokens", 1)
  r("cache_min_len", 1)
  r("prefill_chunk", 1)
  r("prefill_piece", 1)
  r("prefill_tokens", 1)
  r("steps_per_call", 1)
  r("decode_unroll", 1, note="1 = one step a loop iteration")
  r("refill_fraction", 0, 1, low_open=True)
  r("tail_min_batch", 0, note="0 = never shrink")
  r("page_size", 1)
  r("kv_max_tokens", 0, note="0 = no cap")
  r("temperature", 0, note="0 = greedy")
  r("top_p", 0, 1, low_open=True, note="1 = off")
  r("top_k", 0, note="0 = off (no top-k cut)")
  r("max_searches", 0)
  r("max_obs_tokens", 0, note="0 = uncut")
  r("topk", 1, note="documents per search")
  r("search_timeout_s", 0, low_open=True)
  from ssp_jax.sampling.methods import METHODS
  if c.get("sampler", "inverse_cdf") not in METHODS:
    raise ValueError(f"rollout.sampler={c.sampler!r} unknown; use one of {METHODS}")
  from ssp_jax.rollout.ahead import threads
  threads(c.compile_ahead, backend="cpu")   # ValueError naming the field for a bad value
  # the engine checks these too; here a bad name stops a run before the index and the model
  from ssp_jax.sampling.paged_prefill import PREFILL_ATTN
  from ssp_jax.sampling.loop import HEADS
  from ssp_jax.sampling.decode_step import MATMULS
  for name, ok in (("kv_layout", ("dense", "paged", "auto")), ("kv_pool", ("fixed", "grow")),
                   ("prefill_attention", PREFILL_ATTN + ("auto",)), ("decode_head", HEADS),
                   ("decode_matmul", MATMULS)):
    if c.get(name, ok[0]) not in ok:
      raise ValueError(f"rollout.{name}={c.get(name)!r} unknown; use one of {ok}")
  sampled = float(c.get("temperature", 1.0)) > 0
  cut = int(c.get("top_k", 0)) > 0 or float(c.get("top_p", 1.0)) < 1.0
  if c.get("decode_head", "xla") == "pallas" and sampled and (
      cut or c.get("sampler", "inverse_cdf") != "inverse_cdf"):
    raise ValueError("rollout.decode_head='pallas' draws without top-k / top-p and with "
                     "rollout.sampler='inverse_cdf' (the kernel never holds a whole row of "
                     "logits); set rollout.top_k=0, rollout.top_p=1.0 and the sampler, or "
                     "rollout.decode_head='xla'")
