"""The world checker on hand-made questions, the `world check` CLI, the SSP metric helper and the
`ssp.world_dir` config field."""
import json
import os
import time

import pytest

from ssp_jax import config_loader as CL
from ssp_jax.cli import main
from ssp_jax.ssp import game as G
from ssp_jax.ssp.answers import AnswerItem
from ssp_jax.ssp.config import get_ssp_config
from ssp_jax.ssp.validate import ConfigError, validate_config
from ssp_jax.world import WorldChecker, build_world
from ssp_jax.world.game_metrics import world_metrics

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
  d = str(tmp_path_factory.mktemp("world") / "w")
  build_world(7, 300, d)
  w = json.load(open(os.path.join(d, "world.json"), encoding="utf-8"))
  ents = {e["id"]: e for e in w["entities"]}
  out = {}
  for r in w["relations"]:
    out.setdefault(r["subject"], {})[r["relation"]] = r["object"]
  return {"dir": d, "checker": WorldChecker(d), "ents": ents, "out": out,
          "corpus": [json.loads(line) for line in open(os.path.join(d, "corpus.jsonl"))]}


def founder_question(world):
  """A 2-hop bridge: the birth year of a company's founder, where no shorter chain (the
  company's own attributes or neighbours) holds the same year."""
  ents, out = world["ents"], world["out"]
  for cid, e in ents.items():
    if e["type"] != "company":
      continue
    founder = ents[out[cid]["founded_by"]]
    year = founder["attributes"]["birth_year"]
    near = [ents[o] for o in out[cid].values()] + [e]
    if all(year not in x["attributes"].values() for x in near if x is not founder):
      return f"In which year was the founder of {e['name']} born?", str(year), founder
  raise AssertionError("no company without a shortcut")


def test_grounded_two_hop_bridge(world):
  q, a, founder = founder_question(world)
  m = world["checker"].check(q, a)
  assert m["grounded"] and m["hops"] == 2 and m["reason"] is None
  assert not m["leak"] and not m["copy8"] and m["unknown"] == []
  assert len(m["entities"]) == 1 and m["entities"][0] in q
  assert world["checker"].check(q.lower(), a)["hops"] == 2          # names match any case
  assert world["checker"].check(f"Who is {founder['name']}?", a)["hops"] == 1


def test_unknown_entity_is_not_grounded(world):
  c = world["checker"]
  for q in ("In which year was Zorblax Quintavelle born?", "Where was Qwertzmuk born?"):
    m = c.check(q, "1901")
    assert not m["grounded"] and m["reason"] == "unknown_entity" and m["hops"] is None
    assert m["unknown"] and m["unknown"][0] in q
  real = next(e for e in world["ents"].values() if e["type"] == "city")["name"]
  m = c.check(f"Which person from {real} married Zorblax Quintavelle?", real)
  assert m["reason"] == "unknown_entity" and m["entities"] == [real]
  assert c.check("Which year is it?", "1901")["reason"] == "no_entity"
  q, _, _ = founder_question(world)
  assert c.check(q, "Atlantis Prime")["reason"] == "unknown_answer"


def test_answer_leak(world):
  q, _, founder = founder_question(world)
  m = world["checker"].check(q.replace("born?", f"born, {founder['name']}?"), founder["name"])
  assert m["leak"] and m["hops"] == 0 and m["grounded"]
  alias = founder["aliases"][0] if founder["aliases"] else founder["name"]
  assert world["checker"].check(f"Is {alias.upper()} the founder?", founder["name"])["leak"]


def test_a_passage_sentence_turned_into_a_blank_is_a_copy(world):
  c = world["checker"]
  sentence = max((s for p in world["corpus"] for s in p["contents"].split("\n", 1)[1].split(". ")),
                 key=lambda s: len(s.split()))
  words = sentence.rstrip(".").split()
  assert len(words) >= 10
  blank = " ".join(words[:-1]) + " ____?"           # the last word becomes the blank
  assert c.check(blank, words[-1])["copy8"]
  fresh = "Which of the two cities would a traveller reach first from the coast?"
  assert not c.check(fresh, "x")["copy8"]
  doc = "a completely new document that nobody has ever put into this little world before today"
  q = "nobody has ever put into this little world before which day?"
  assert not c.check(q, "today")["copy8"] and c.check(q, "today", [doc])["copy8"]


def test_checks_are_fast(world):
  q, a, _ = founder_question(world)
  t0 = time.perf_counter()
  for _ in range(500):
    world["checker"].check(q, a)
  assert 500 / (time.perf_counter() - t0) > 300     # thousands a second on an idle core


def test_cli_check_lines_bad_lines_and_summary(world, tmp_path, capsys):
  q, a, _ = founder_question(world)
  inp = tmp_path / "in.jsonl"
  inp.write_text("\n".join([json.dumps({"question": q, "answer": a, "step": 3}),
                            json.dumps({"question": "Where was Qwertzmuk born?", "answer": [a]}),
                            "{not json", json.dumps({"question": q}), ""]) + "\n")
  out = tmp_path / "out.jsonl"
  assert main(["world", "check", "--world", world["dir"], "--in", str(inp), "--out",
               str(out)]) == 0
  assert "2 bad lines" in capsys.readouterr().err
  lines = [json.loads(line) for line in out.read_text().splitlines()]
  assert lines[0]["step"] == 3 and lines[0]["grounded"] and lines[0]["hops"] == 2
  assert lines[1]["reason"] == "unknown_entity"
  s = lines[-1]["summary"]
  assert (s["n"], s["bad"], s["grounded_rate"], s["hops_mean"]) == (2, 2, 0.5, 2.0)
  assert s["hops_hist"] == {"2": 1, "none": 1} and s["leak_rate"] == 0 and s["copy8_rate"] == 0
  assert main(["world", "check", "--world", str(tmp_path / "nope"), "--in", str(inp)]) == 2
  err = capsys.readouterr().err.strip()
  assert len(err.splitlines()) == 1 and "world.json" in err
  assert main(["world", "check", "--world", world["dir"], "--in", str(tmp_path / "no")]) == 2
  assert "--in" in capsys.readouterr().err


def test_world_metrics_of_a_step_and_the_game_hook(world):
  q, a, founder = founder_question(world)
  proposals = [(q, a, True),                                      # grounded, valid
               ("Where was Qwertzmuk born?", a, True),            # fools the RAG check
               (None, a, False),                                  # no question
               (f"Who is {founder['name']}?", founder["name"], False)]   # leak, invalid
  m, per = world_metrics(world["checker"], proposals)
  assert per[2] is None and per[0]["hops"] == 2 and per[3]["leak"]
  assert m["world/checked"] == 3 and m["world/grounded_rate"] == pytest.approx(2 / 3)
  assert m["world/hops_mean"] == 1.0 and m["world/leak_rate"] == pytest.approx(1 / 3)
  assert m["world/valid_grounded_rate"] == 0.5 and m["rag/fooled_rate"] == 0.5
  assert m["world/copy8_rate"] == 0.0
  game = G.SSPGame(get_ssp_config(), None, None, [], verifier=None,
                   world_checker=world["checker"])
  props = [G.Proposal(AnswerItem(ans, 2), None, question, None if ok else "rule")
           for question, ans, ok in proposals]
  out = G.StepOutput([], None, None, None, {}, [{"kind": "proposal"} for _ in props])
  game._world(props, out)
  assert out.metrics["rag/fooled_rate"] == 0.5 and "time/world" in out.metrics
  assert out.samples[0]["world"]["hops"] == 2 and out.samples[2]["world"] is None


def test_config_world_dir_must_hold_a_world(world, tmp_path):
  cfg = CL.load_config_file(os.path.join(REPO, "configs", "tiny.py"))
  assert cfg.ssp.world_dir == ""
  cfg.ssp.world_dir = str(tmp_path)
  with pytest.raises(ConfigError, match="ssp.world_dir"):
    validate_config(cfg)
  cfg.ssp.world_dir = world["dir"]
  validate_config(cfg)
