"""`ssp-jax generate` with a retriever: the solver's search-agent prompt by default, `</answer>`
a stop, and a response cut by the token limit keeps its last observation."""
import json

import pytest

from ssp_jax import cli
from ssp_jax import generate_cli as G
from ssp_jax import prompts_format as pf
from ssp_jax.ssp.prompts import solver_messages
from ssp_jax.testing.tiny_checkpoint import make_tiny_checkpoint
from ssp_jax.tokenizer import Tokenizer
from ssp_jax.types import Trajectory


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
  from retrieval.corpus import default_corpus_path
  from retrieval.index import build_bm25
  root = tmp_path_factory.mktemp("gen")
  index = str(root / "bm25")
  build_bm25(default_corpus_path(), index, progress=False)
  return make_tiny_checkpoint(str(root / "ckpt")), index


def test_prompt_with_a_retriever_is_the_solver_prompt(assets, tmp_path, capsys):
  ckpt, index = assets
  q = "Who wrote Moby-Dick?"
  tok = Tokenizer.from_dir(ckpt)
  base = ["generate", "--checkpoint", ckpt, "--prompt", q, "--max-new-tokens", "4"]
  assert cli.main(base + ["--index-dir", index]) == 0
  line = json.loads(capsys.readouterr().out)
  assert line["num_prompt_tokens"] == len(tok.prompt_ids(solver_messages(q)))
  assert cli.main(base + ["--index-dir", index, "--search-prompt", "none"]) == 0
  plain = json.loads(capsys.readouterr().out)
  assert plain["num_prompt_tokens"] == len(tok.prompt_ids([{"role": "user", "content": q}]))
  tpl = tmp_path / "t.txt"
  tpl.write_text("Search, then answer: {question}")
  assert cli.main(base + ["--index-dir", index, "--search-prompt", str(tpl)]) == 0
  mine = json.loads(capsys.readouterr().out)
  assert mine["num_prompt_tokens"] == len(tok.prompt_ids(
      [{"role": "user", "content": "Search, then answer: " + q}]))
  tpl.write_text("no placeholder")
  assert cli.main(base + ["--index-dir", index, "--search-prompt", str(tpl)]) == 2
  assert "{question}" in capsys.readouterr().err


def test_prompt_builders_and_stops():
  assert G.chat_prompt("q?", None, G.SOLVER) == solver_messages("q?")
  assert G.chat_prompt("q?", "S", G.SOLVER)[0] == {"role": "system", "content": "S"}
  assert G.chat_prompt("q?", None, None) == [{"role": "user", "content": "q?"}]
  assert G.stop_strings(None, True, "</search>") == ("</answer>", "</search>")
  assert G.stop_strings(["."], True, "</search>") == (".", "</search>")
  assert G.stop_strings(None, False, "</search>") == ()


def test_a_cut_response_keeps_its_last_observation(assets):
  ckpt, _ = assets
  tok = Tokenizer.from_dir(ckpt)
  said = tok.encode("<search> moby dick </search>")
  docs = [{"id": "1", "contents": "\"Moby-Dick\"\nA novel by Herman Melville."}]
  cut = Trajectory(prompt_ids=[1], response_ids=said, loss_mask=[1] * len(said),
                   logprobs=[0.0] * len(said), text=tok.decode(said), queries=["moby dick"],
                   docs=[docs], num_searches=1, stop_reason="length")
  text, ids, added = G.with_last_observation(tok, cut, 512)
  assert added and text.startswith(cut.text) and pf.INFO_CLOSE in text
  assert "Herman Melville" in text and ids[:len(said)] == said and len(ids) > len(said)
  # a response whose observation the engine kept is shown as it is; one that ended
  # otherwise is left as it is
  obs = tok.encode(pf.observation_text(pf.render_docs(docs)))
  spliced = Trajectory(prompt_ids=[1], response_ids=said + obs,
                       loss_mask=[1] * len(said) + [0] * len(obs), logprobs=[0.0] * 99,
                       text="t", queries=["moby dick"], docs=[docs], num_searches=1,
                       stop_reason="length")
  assert G.with_last_observation(tok, spliced, 512) == ("t", said + obs, True)
  assert G.with_last_observation(tok, Trajectory(
      prompt_ids=[1], response_ids=said, loss_mask=[1] * len(said), logprobs=[0.0],
      text="t", queries=["q"], docs=[docs], num_searches=1, stop_reason="max_searches"),
      512)[2] is False
