"""The original's data as is: verl-schema parquet and JSONL, the flat JSONL, instruction text,
data_source, and errors that name the row and the field (fixtures written here with pyarrow)."""
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ssp_jax.svs import data as D
from ssp_jax.svs import prompts as P

SUFFIX = P.SOLVE_SUFFIX          # " Please reason step by step, and put ... \\boxed{}."


def verl_rows():
  """Rows in the original files' layout (MATH_12k / dapo_math_17k / MATH-AIME-Evaluation)."""
  return [
      {"data_source": "MATH-500",
       "prompt": [{"content": "What is $1+1$?" + SUFFIX, "role": "user"}],
       "ability": "math", "reward_model": {"ground_truth": "2", "style": "rule"},
       "extra_info": {"answer": "1+1=\\boxed{2}", "index": 486, "split": "test"}},
      {"data_source": "AIME-2024-30",
       "prompt": [{"content": "You are a careful solver.", "role": "system"},
                  {"content": "Find $m+n$ where $m=3$, $n=4$.", "role": "user"}],
       "ability": "math", "reward_model": {"ground_truth": "7", "style": "rule"},
       "extra_info": {"answer": "", "index": 3, "split": "test"}},
      {"data_source": "DAPO-17k",
       "prompt": [{"content": "Solve the following math problem step by step. The last line of "
                              "your response should be of the form Answer: $Answer (without "
                              "quotes) where $Answer is the answer to the problem.\n\nWhat is "
                              "$2^{10}$?\n\nRemember to put your answer on its own line after "
                              "\"Answer:\".", "role": "user"}],
       "ability": "MATH", "reward_model": {"ground_truth": "1024", "style": "rule-lighteval/MATH_v2"},
       "extra_info": {"answer": "", "index": 11, "split": "train"}},
  ]


EXPECTED = [("MATH-500-486", "What is $1+1$?", "2", "MATH-500"),
            ("AIME-2024-30-3", "Find $m+n$ where $m=3$, $n=4$.", "7", "AIME-2024-30"),
            ("DAPO-17k-11", "What is $2^{10}$?", "1024", "DAPO-17k")]


def _write_parquet(path, rows):
  pq.write_table(pa.Table.from_pylist(rows), str(path))


def _as_tuples(problems):
  return [(p.id, p.problem, p.answer, p.source) for p in problems]


def test_verl_parquet(tmp_path):
  path = tmp_path / "train.parquet"
  _write_parquet(path, verl_rows())
  assert _as_tuples(D.load_problems(str(path))) == EXPECTED


def test_verl_jsonl_as_pandas_to_json_writes_it(tmp_path):
  path = tmp_path / "train.jsonl"
  path.write_text("".join(json.dumps(r) + "\n" for r in verl_rows()))
  assert _as_tuples(D.load_problems(str(path))) == EXPECTED


def test_flat_jsonl_with_data_source(tmp_path):
  path = tmp_path / "eval.jsonl"
  rows = [{"data_source": "MATH-500", "question": "How many cubic inches?.", "ref_answer": "216"},
          {"data_source": "AIME-2025-30", "question": "Find x." + SUFFIX, "ref_answer": 7}]
  path.write_text("".join(json.dumps(r) + "\n" for r in rows))
  assert _as_tuples(D.load_problems(str(path))) == [
      ("eval-0", "How many cubic inches?.", "216", "MATH-500"),
      ("eval-1", "Find x.", "7", "AIME-2025-30")]


def test_suffix_is_stripped_so_the_solving_prompt_is_not_doubled(tmp_path):
  path = tmp_path / "train.parquet"
  _write_parquet(path, verl_rows()[:1])
  (p,) = D.load_problems(str(path))
  content = P.solve_messages(p.problem)[0]["content"]
  assert content.count("Please reason step by step") == 1 and content.endswith(SUFFIX)
  (kept,) = D.load_problems(str(path), strip_instructions=False)
  assert kept.problem.endswith(SUFFIX)


def test_verl_wins_only_without_flat_keys(tmp_path):
  """A flat record that also carries a `prompt` column is read as flat."""
  path = tmp_path / "mixed.jsonl"
  path.write_text(json.dumps({"problem": "What is 5?", "answer": "5", "prompt": "ignored"}) + "\n")
  assert _as_tuples(D.load_problems(str(path))) == [("mixed-0", "What is 5?", "5", "")]


@pytest.mark.parametrize("mutate,field", [
    (lambda r: r.pop("reward_model"), "`reward_model.ground_truth`"),
    (lambda r: r.update(reward_model={"ground_truth": "  ", "style": "rule"}),
     "`reward_model.ground_truth`"),
    (lambda r: r.update(prompt=[]), "`prompt`"),
    (lambda r: r.update(prompt=[{"content": "be nice", "role": "system"}]), "`prompt`"),
    (lambda r: r.update(prompt=[{"content": "", "role": "user"}]), "`prompt[-1].content`"),
])
def test_bad_row_is_named_with_its_field_parquet_and_jsonl(tmp_path, mutate, field):
  rows = verl_rows()
  mutate(rows[2])
  jsonl = tmp_path / "bad.jsonl"
  jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
  with pytest.raises(ValueError) as e:
    D.load_problems(str(jsonl))
  assert f"{jsonl}:3" in str(e.value) and field in str(e.value)
  parquet = tmp_path / "bad.parquet"          # a dropped column is null in that row
  _write_parquet(parquet, rows)
  with pytest.raises(ValueError) as e:
    D.load_problems(str(parquet))
  assert f"{parquet}: row 2" in str(e.value) and field in str(e.value)


def test_a_parquet_file_that_is_not_parquet_and_binary_jsonl(tmp_path):
  fake = tmp_path / "fake.parquet"
  fake.write_text("not parquet at all")
  with pytest.raises(ValueError, match="not a readable parquet file"):
    D.load_problems(str(fake))
  binary = tmp_path / "data.jsonl"
  _write_parquet(binary, verl_rows())        # a parquet file under a .jsonl name
  with pytest.raises(ValueError, match="parquet file named \\*.parquet"):
    D.load_problems(str(binary))


def test_paper_configs_point_at_the_originals_file_names():
  from ssp_jax.config_loader import load_config_file, repo_path
  for name, train in (("svs_qwen2_5_3b_instruct", "MATH_12k.parquet"),
                      ("svs_qwen2_5_32b_instruct", "dapo_math_17k.parquet"),
                      ("svs_llama3_1_8b_instruct", "MATH_12k.parquet")):
    c = load_config_file(repo_path("configs", name + ".py") + ":gpu,root=/r")
    assert c.svs.train_path == f"/r/data/{train}"
    assert dict(c.eval.datasets) == {"math_aime": "/r/data/MATH-AIME-Evaluation.parquet"}
    # the original's filters and skip rule
    assert c.svs.problem_filter == "tokens" and c.svs.skip_without_synthesis
    assert c.svs.synthesis_prompt == "original"
    assert (c.svs.max_problem_prompt_tokens or c.rollout.max_prompt_tokens) == 4096
