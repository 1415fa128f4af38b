"""Summarizes a JAX profiler trace (perfetto JSON) as one JSON object per track.

  python bench/trace_summary.py DIR [--top 25] [--match GPU] [--by-op memcpy [--hlo FILE]]

DIR is what `bench/sampler.py --profile DIR` (or `jax.profiler.trace(DIR,
create_perfetto_trace=True)`) wrote; every `*.trace.json.gz` under it is read. For each track
(process / thread) whose process name contains `--match` (default: the GPU devices; `""` = all)
it prints: `events`, `busy_ms` (the union of the events' intervals), `span_ms` (first start to
last end), `idle_frac` (1 - busy / span: gaps between kernels, e.g. launch overhead), the
`top` event names by total time with their count and mean microseconds, and `by_class`: the
milliseconds of all the track's events by kind, from their names (`attention`: cuDNN or Pallas
attention, `gemm`: cuBLAS / cuBLASLt / Triton GEMMs, `copy`: memcpy / memset / copies and
transposes, `reduce`: XLA reduction fusions, `other`: every other fusion or op), and `gaps`: the idle time
by gap length and the kernel pairs around the long gaps (`gaps()`). Names are
grouped after stripping a trailing `.N` / `_N` instance number, so `fusion.12` and `fusion.97`
add up.

`--by-op REGEX` adds `by_op`: the events whose name matches REGEX (e.g. `memcpy`) grouped by the
XLA instruction that launched them (the events' `hlo_op` argument, which JAX's profiler records
on CPU and GPU), so a kernel such as `memcpy128` is traced to its instructions. With `--hlo
FILE` (the compiled HLO text: `bench/train_step.py --profile` writes DIR/<layout>.hlo.txt) each
instruction also gets its line's result shape and opcode (`hlo`) and its JAX source path
(`op_name`).
"""
from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import os
import re
import sys


def _load(path: str) -> list[dict]:
  opener = gzip.open if path.endswith(".gz") else open
  with opener(path, "rt") as f:
    data = json.load(f)
  return data["traceEvents"] if isinstance(data, dict) else data


def _group(name: str) -> str:
  return re.sub(r"([._]\d+)+$", "", name)


CLASSES = (   # first match wins; the names are CUDA kernel names or XLA op names
    ("attention", re.compile(r"sdpa|fmha|flash|attention|cudnn", re.I)),
    ("gemm", re.compile(r"nvjet|gemm|cublas|cutlass|xmma|matmul|dot", re.I)),
    ("copy", re.compile(r"memcpy|memset|copy|transpose", re.I)),
    ("reduce", re.compile(r"reduce", re.I)),
)


def kernel_class(name: str) -> str:
  for cls, pattern in CLASSES:
    if pattern.search(name):
      return cls
  return "other"


def _busy(intervals: list[tuple[float, float]]) -> float:
  total, end = 0.0, float("-inf")
  for a, b in sorted(intervals):
    if b <= end:
      continue
    total += b - max(a, end)
    end = b
  return total


_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+) = (.*)$")
_OP_NAME = re.compile(r'op_name="([^"]*)"')


def hlo_instructions(text: str) -> dict[str, dict]:
  """{instruction name: {"hlo": result shape and opcode with operands, "op_name": JAX path}}
  from compiled HLO text (metadata and backend configs cut from `hlo`)."""
  out = {}
  for line in text.splitlines():
    m = _INSTR.match(line)
    if not m:
      continue
    body = m.group(2)
    op_name = _OP_NAME.search(body)
    body = re.split(r", (?:metadata|backend_config|frontend_attributes)=", body)[0]
    out[m.group(1)] = {"hlo": body[:300], "op_name": op_name.group(1) if op_name else ""}
  return out


def by_op(events: list[dict], pattern: str, top: int,
          hlo: dict[str, dict] | None = None) -> list[dict]:
  """Time of the events whose name matches `pattern`, by their `hlo_op` argument."""
  rx = re.compile(pattern)
  agg = collections.defaultdict(lambda: [0.0, 0, set()])
  for e in events:
    if rx.search(e["name"]):
      a = agg[(e.get("args") or {}).get("hlo_op", "?")]
      a[0] += float(e["dur"])
      a[1] += 1
      a[2].add(e["name"])
  rows = []
  for op, (t, c, names) in sorted(agg.items(), key=lambda kv: -kv[1][0])[:top]:
    row = {"hlo_op": op, "total_ms": round(t / 1e3, 3), "count": c, "mean_us": round(t / c, 2),
           "kernels": sorted(names)}
    if hlo is not None:
      row.update(hlo.get(op, {"hlo": "?", "op_name": ""}))
    rows.append(row)
  return rows


GAP_EDGES_US = (2.0, 5.0, 10.0, 50.0, 200.0)


def gaps(evs: list[dict], top: int) -> dict:
  """The idle time between a track's events: how it splits by gap length (`by_us`: count and
  milliseconds of gaps under 2, 5, 10, 50, 200 us and longer), and the `top` (previous kernel,
  next kernel) pairs by milliseconds of gaps of 10 us or more (where the device waited for the
  host: e.g. a loop's predicate copied back each iteration, or a launch after a sync)."""
  iv = sorted((float(e["ts"]), float(e["ts"]) + float(e["dur"]), _group(e["name"])) for e in evs)
  hist = collections.defaultdict(lambda: [0, 0.0])
  pairs = collections.defaultdict(lambda: [0, 0.0])
  end, prev = float("-inf"), ""
  for a, b, name in iv:
    if end > float("-inf") and a > end:
      g = a - end
      edge = next((e for e in GAP_EDGES_US if g < e), None)
      key = f"<{edge:g}" if edge is not None else f">={GAP_EDGES_US[-1]:g}"
      hist[key][0] += 1
      hist[key][1] += g
      if g >= 10.0:
        pairs[(prev, name)][0] += 1
        pairs[(prev, name)][1] += g
    if b >= end:
      end, prev = b, name
  order = [f"<{e:g}" for e in GAP_EDGES_US] + [f">={GAP_EDGES_US[-1]:g}"]
  return {"by_us": {k: {"count": hist[k][0], "ms": round(hist[k][1] / 1e3, 3)}
                    for k in order if k in hist},
          "top_pairs": [{"after": a, "before": b, "count": c, "ms": round(t / 1e3, 3),
                         "mean_us": round(t / c, 2)}
                        for (a, b), (c, t) in sorted(pairs.items(), key=lambda kv: -kv[1][1])[:top]]}


def summarize(events: list[dict], match: str, top: int, op_pattern: str = "",
              hlo: dict[str, dict] | None = None) -> list[dict]:
  procs, threads = {}, {}
  for e in events:
    if e.get("ph") == "M" and e.get("name") == "process_name":
      procs[e["pid"]] = e["args"]["name"]
    elif e.get("ph") == "M" and e.get("name") == "thread_name":
      threads[(e["pid"], e["tid"])] = e["args"]["name"]
  by_track = collections.defaultdict(list)
  for e in events:
    if e.get("ph") == "X" and "dur" in e:
      pname = procs.get(e["pid"], str(e["pid"]))
      if match and match not in pname:
        continue
      by_track[(pname, threads.get((e["pid"], e["tid"]), str(e["tid"])))].append(e)
  out = []
  for (pname, tname), evs in sorted(by_track.items()):
    iv = [(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in evs]
    span = max(b for _, b in iv) - min(a for a, _ in iv)
    busy = _busy(iv)
    agg = collections.defaultdict(lambda: [0.0, 0])
    for e in evs:
      a = agg[_group(e["name"])]
      a[0] += float(e["dur"])
      a[1] += 1
    rows = sorted(agg.items(), key=lambda kv: -kv[1][0])[:top]
    classes = collections.defaultdict(float)
    for n, (t, _) in agg.items():
      classes[kernel_class(n)] += t
    out.append({"process": pname, "thread": tname, "events": len(evs),
                "busy_ms": round(busy / 1e3, 3), "span_ms": round(span / 1e3, 3),
                "idle_frac": round(1 - busy / span, 4) if span else 0.0,
                "top": [{"name": n, "total_ms": round(t / 1e3, 3), "count": c,
                         "mean_us": round(t / c, 2), "frac_of_busy": round(t / busy, 4)}
                        for n, (t, c) in rows],
                "by_class": {k: round(v / 1e3, 3)
                             for k, v in sorted(classes.items(), key=lambda kv: -kv[1])},
                "gaps": gaps(evs, min(top, 10))})
    if op_pattern:
      out[-1]["by_op"] = by_op(evs, op_pattern, top, hlo)
  return out


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("dir")
  p.add_argument("--top", type=int, default=25)
  p.add_argument("--match", default="GPU", help="keep tracks whose process name contains this")
  p.add_argument("--by-op", default="", metavar="REGEX",
                 help="events whose name matches: their time by XLA instruction (hlo_op)")
  p.add_argument("--hlo", default="", metavar="FILE",
                 help="compiled HLO text: shapes and JAX paths of the --by-op instructions")
  a = p.parse_args(argv)
  if a.hlo and not a.by_op:
    p.error("--hlo annotates --by-op's instructions: pass --by-op REGEX (e.g. memcpy) too")
  hlo = None
  if a.hlo:
    try:
      with open(a.hlo) as f:
        hlo = hlo_instructions(f.read())
    except OSError as e:
      print(f"trace_summary.py: cannot read --hlo {a.hlo}: {e.strerror}", file=sys.stderr)
      return 2
  paths = sorted(glob.glob(os.path.join(a.dir, "**", "*.trace.json.gz"), recursive=True)
                 + glob.glob(os.path.join(a.dir, "**", "*trace.json"), recursive=True))
  if not paths:
    print(f"trace_summary.py: no *.trace.json.gz under {a.dir}; profile with "
          f"`bench/sampler.py --profile {a.dir}`", file=sys.stderr)
    return 2
  printed, names = 0, set()
  for path in paths:
    events = _load(path)
    names |= {e["args"]["name"] for e in events
              if e.get("ph") == "M" and e.get("name") == "process_name"}
    for track in summarize(events, a.match, a.top, a.by_op, hlo):
      print(json.dumps({"trace": os.path.relpath(path, a.dir), **track}), flush=True)
      printed += 1
  if not printed:
    print(f"trace_summary.py: no track's process name contains {a.match!r} (processes: "
          f"{sorted(names)}); pass --match with one of them, or --match '' for all",
          file=sys.stderr)
    return 2
  return 0


if __name__ == "__main__":
  sys.exit(main())
