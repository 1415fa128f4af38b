"""The seeded world: byte determinism, file schemas, every held-out answer recomputed from the
graph by an independent walk, the split, the answer set, the cache and the `world build` CLI."""
import datetime
import gzip
import json
import os
import re
import subprocess
import sys
import threading

import pytest

from ssp_jax.cli import main
from ssp_jax.metrics import normalize_answer
from ssp_jax.ssp.answers import load_answers
from ssp_jax.world import WORLD_FILES, build_world, ensure_world

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZE = 300
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December"]


def read_jsonl(path):
  with open(path, encoding="utf-8") as f:
    return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
  d = str(tmp_path_factory.mktemp("world") / "w")
  summary = build_world(3, SIZE, d)
  return {"dir": d, "summary": summary,
          "world": json.load(open(os.path.join(d, "world.json"), encoding="utf-8")),
          "corpus": read_jsonl(os.path.join(d, "corpus.jsonl")),
          "train": read_jsonl(os.path.join(d, "qa_train.jsonl")),
          "heldout": read_jsonl(os.path.join(d, "qa_heldout.jsonl"))}


def file_bytes(d):
  return {f: open(os.path.join(d, f), "rb").read() for f in WORLD_FILES}


def test_same_seed_same_bytes_in_process_and_via_the_cli_another_seed_differs(world, tmp_path):
  first = file_bytes(world["dir"])
  build_world(3, SIZE, str(tmp_path / "again"))
  assert file_bytes(str(tmp_path / "again")) == first
  env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
  out = subprocess.run([sys.executable, "-m", "ssp_jax", "world", "build", "--seed", "3",
                        "--size", str(SIZE), "--out", str(tmp_path / "cli")],
                       capture_output=True, text=True, env=env, timeout=300)
  assert out.returncode == 0, out.stderr
  summary = json.loads(out.stdout.strip().splitlines()[-1])
  assert summary["size"] == SIZE and summary["heldout"]["n"] == len(world["heldout"])
  assert file_bytes(str(tmp_path / "cli")) == first
  build_world(4, SIZE, str(tmp_path / "other"))
  other = file_bytes(str(tmp_path / "other"))
  assert all(other[f] != first[f] for f in WORLD_FILES)


def test_schema_of_every_file(world):
  ids = set()
  for p in world["corpus"]:
    assert set(p) == {"id", "contents"} and isinstance(p["id"], str) and p["id"] not in ids
    ids.add(p["id"])
    title, text = p["contents"].split("\n", 1)
    assert title.startswith('"') and title.endswith('"') and len(text.split()) >= 5
  for rec in world["train"] + world["heldout"]:
    assert {"id", "question", "golden_answers", "hops", "kind", "support", "path"} <= set(rec)
    assert rec["hops"] in (1, 2, 3) and rec["kind"] in (
        "attribute", "relation", "bridge", "chain", "comparison")
    assert rec["golden_answers"] and all(isinstance(a, str) and a for a in rec["golden_answers"])
    assert len(rec["support"]) == len(rec["path"]) == (2 if rec["kind"] == "comparison"
                                                         else rec["hops"])
    assert all(s and set(s) <= ids for s in rec["support"])
  items, stats = load_answers(os.path.join(world["dir"], "answers.jsonl"))
  assert stats.bad == 0 and len(items) == world["summary"]["answers"]["n"] >= 50
  assert {it.hops for it in items} == {1, 2, 3}
  for line in read_jsonl(os.path.join(world["dir"], "answers.jsonl")):
    assert set(line) == {"ground_truth", "search_turns", "category"}
  w = world["world"]
  assert (w["seed"], w["size"], w["version"]) == (3, SIZE, 1)
  for e in w["entities"]:
    assert {"id", "kind", "type", "name", "aliases", "attributes", "sources", "passages"} <= set(e)
    assert set(e["sources"]) == set(e["attributes"])
    assert all(e["sources"].values()) and e["passages"]      # every fact is stated somewhere
  assert all(r["passages"] for r in w["relations"])


def test_sizes_names_and_split(world):
  w, s = world["world"], world["summary"]
  assert len(w["entities"]) == SIZE == sum(s["entities"].values())
  assert set(s["kinds"]) == {"person", "place", "organisation", "work", "event"}
  keys = [normalize_answer(n) for e in w["entities"] for n in [e["name"], *e["aliases"]]]
  assert len(keys) == len(set(keys))              # no two entities share a name or an alias
  held, train = world["heldout"], world["train"]
  assert {r["hops"] for r in held} == {1, 2, 3} and len(held) > 100
  assert 0.2 < len(held) / (len(held) + len(train)) < 0.4        # HELDOUT_FRACTION 0.3
  assert not {r["question"] for r in held} & {r["question"] for r in train}
  chain = lambda r: json.dumps(sorted(r["path"]) if r["kind"] == "comparison" else r["path"])
  assert not {chain(r) for r in held} & {chain(r) for r in train}
  assert len({r["id"] for r in held + train}) == len(held) + len(train)


def test_names_are_invented(world):
  """No entity name occurs in the shipped Wikipedia sample, and few of their words do."""
  with gzip.open(os.path.join(REPO, "retrieval", "data", "wiki_sample.jsonl.gz"), "rt") as f:
    text = " ".join(json.loads(line)["contents"] for line in f).lower()
  vocab = set(re.findall(r"[a-z]+", text))
  made = set()
  for e in world["world"]["entities"]:
    if e["type"] in ("person", "city", "region", "country"):
      assert f" {e['name'].lower()} " not in text, e["name"]
      made.update(w.lower() for w in e["name"].split())
  assert len(made & vocab) <= 0.02 * len(made), sorted(made & vocab)


def _expected(value) -> str:
  """The written form an answer must normalise to, computed here without the package."""
  if isinstance(value, int):
    return str(value)
  if re.fullmatch(r"\d{4}-\d\d-\d\d", value):
    d = datetime.date.fromisoformat(value)
    return normalize_answer(f"{d.day} {MONTHS[d.month - 1]} {d.year}")
  return normalize_answer(value)


def test_every_heldout_answer_is_recomputed_by_walking_the_graph(world):
  w = world["world"]
  ents = {e["id"]: e for e in w["entities"]}
  objects, stated = {}, {}
  for r in w["relations"]:
    objects.setdefault((r["subject"], r["relation"]), []).append(r["object"])
    stated[(r["subject"], r["relation"], r["object"])] = r["passages"]
  texts = {p["id"]: normalize_answer(p["contents"]) for p in world["corpus"]}
  named = lambda e, q: any(n.lower() in q.lower() for n in [e["name"], *e["aliases"]])
  for rec in world["heldout"]:
    q, path = rec["question"], rec["path"]
    if rec["kind"] == "comparison":
      (a, attr, va), (b, attr_b, vb) = path
      assert attr == attr_b and va != vb and named(ents[a], q) and named(ents[b], q)
      assert (va, vb) == (ents[a]["attributes"][attr], ents[b]["attributes"][attr])
      win = (a if va < vb else b) if rec["compare"] == "min" else (a if va > vb else b)
      assert rec["golden_answers"][0] == ents[win]["name"], q
      continue
    assert named(ents[path[0][0]], q), q
    for k, (subj, what, obj) in enumerate(path):
      if k:
        assert subj == path[k - 1][2]                    # the chain is connected
      if what in ents[subj]["attributes"]:
        assert k == len(path) - 1 and ents[subj]["attributes"][what] == obj
        assert rec["support"][k] == ents[subj]["sources"][what]
        assert any(_expected(obj) in texts[p] for p in rec["support"][k])
      else:
        assert objects[(subj, what)] == [obj]            # functional: one object, this one
        assert rec["support"][k] == stated[(subj, what, obj)]
        assert any(normalize_answer(ents[obj]["name"]) in texts[p] for p in rec["support"][k])
    subj, what, obj = path[-1]
    if what in ents[subj]["attributes"]:
      assert normalize_answer(rec["golden_answers"][0]).startswith(_expected(obj)), q
    else:
      assert rec["golden_answers"] == [ents[obj]["name"], *ents[obj]["aliases"]], q
    assert not any(f" {normalize_answer(g)} " in f" {normalize_answer(q)} "
                   for g in rec["golden_answers"]), q


def test_ensure_world_builds_once_and_survives_concurrent_calls(tmp_path):
  root = str(tmp_path / "cache")
  got = []
  threads = [threading.Thread(target=lambda: got.append(ensure_world(seed=5, size=120, root=root)))
             for _ in range(2)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  d = os.path.join(root, "seed5_n120")
  assert got == [d, d] and sorted(os.listdir(root)) == ["seed5_n120"]   # no temporary left
  assert sorted(os.listdir(d)) == sorted(WORLD_FILES)
  stamp = os.stat(os.path.join(d, "world.json")).st_mtime_ns
  assert ensure_world(seed=5, size=120, root=root) == d
  assert os.stat(os.path.join(d, "world.json")).st_mtime_ns == stamp     # reused, not rebuilt
  os.remove(os.path.join(d, "answers.jsonl"))                            # a broken world
  assert ensure_world(seed=5, size=120, root=root) == d
  assert sorted(os.listdir(d)) == sorted(WORLD_FILES)


def test_cli_build_refuses_a_foreign_directory(world, tmp_path, capsys):
  junk = tmp_path / "junk"
  junk.mkdir()
  (junk / "notes.txt").write_text("mine")
  assert main(["world", "build", "--seed", "3", "--size", "120", "--out", str(junk)]) == 2
  err = capsys.readouterr().err.strip()
  assert len(err.splitlines()) == 1 and "--force" in err and "holds no world" in err
  assert sorted(os.listdir(junk)) == ["notes.txt"]                       # nothing written
  assert main(["world", "build", "--seed", "3", "--size", str(SIZE), "--out", world["dir"]]) == 0
  assert main(["world", "build", "--seed", "9", "--size", str(SIZE), "--out", world["dir"]]) == 2
  assert "seed 3, size 300" in capsys.readouterr().err
  assert main(["world", "build", "--seed", "3", "--size", "120", "--out", str(junk),
               "--force"]) == 0
  assert json.loads(capsys.readouterr().out)["size"] == 120
  assert main(["world", "build", "--seed", "3", "--size", "10", "--out", str(tmp_path / "s")]) == 2
  assert "size=10" in capsys.readouterr().err


@pytest.mark.slow
def test_default_size_counts(tmp_path):
  s = build_world(0, 5000, str(tmp_path / "w"))
  assert sum(s["entities"].values()) == 5000 and s["heldout"]["n"] >= 3000
  assert all(s["heldout"]["hops"][h] >= 800 for h in ("1", "2", "3"))
  assert s["train"]["n"] >= 5000 and s["answers"]["n"] >= 1000
