"""Jitted sampler: chunk prefill into KV-cache rows and a `lax.while_loop` decode that stops on
eos ids and on stop *strings* matched exactly in the decoded bytes (see stops.py)."""
from ssp_jax.sampling.decode_step import ATTN_IMPLS, decode_forward, decode_params
from ssp_jax.sampling.loop import (EOS, HEADS, LIMIT, RUNNING, STOPPED, DecodeOut, DecodeState,
                                   decode, grow_pages, init_paged_state, init_state,
                                   make_decode_params, prefill_rows, resize_cache, set_rows,
                                   set_table, set_windows, take_rows)
from ssp_jax.sampling.methods import SamplingParams, sample_next
from ssp_jax.sampling.paged_prefill import prefill_pages
from ssp_jax.sampling.stops import (HostStopTables, StopTables, build_stop_tables, check_stop,
                                    first_stop_end)
