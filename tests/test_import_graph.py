"""No two packages of the project import each other, and the three import roots keep their one-way
direction (`ssp_jax -> models, retrieval`; `retrieval -> models`; `models` imports neither).

Every module under ssp_jax/, models/ and retrieval/ is parsed with `ast` (nothing is imported), and
each import, at module level or inside a function, becomes an edge between packages:
  - a subpackage of ssp_jax (`ssp_jax/ssp/`, `ssp_jax/run/`, ...) is one package, its nested
    packages included (`ssp_jax/ssp/warmstart/` belongs to `ssp_jax.ssp`);
  - each top-level module of ssp_jax (`ssp_jax/tokenizer.py`, `ssp_jax/train_cli.py`) is a
    package of its own: the CLIs sit above the games, the small utilities below everything;
  - `models` and `retrieval` are one package each.
A cycle in that graph (a -> b -> a, or longer) fails the test, naming the packages and one import
of each edge of the cycle.
"""
from __future__ import annotations

import ast
import os

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOTS = ("ssp_jax", "models", "retrieval")


def module_files() -> dict[str, str]:
  """Dotted module name -> file, for every .py file under the three roots."""
  out = {}
  for root in ROOTS:
    for d, dirs, files in os.walk(os.path.join(REPO, root)):
      dirs[:] = sorted(x for x in dirs if not x.startswith((".", "__pycache__")))
      for f in sorted(files):
        if f.endswith(".py"):
          rel = os.path.relpath(os.path.join(d, f), REPO)[:-3].split(os.sep)
          if rel[-1] == "__init__":
            rel = rel[:-1]
          out[".".join(rel)] = os.path.join(d, f)
  return out


def package_of(module: str, modules: dict[str, str]) -> str | None:
  """The package (graph node) that `module` belongs to; None outside the project."""
  parts = module.split(".")
  if parts[0] not in ROOTS:
    return None
  if parts[0] != "ssp_jax" or len(parts) == 1:
    return parts[0]
  sub = "ssp_jax." + parts[1]
  if sub in modules or os.path.isdir(os.path.join(REPO, "ssp_jax", parts[1])):
    return sub
  return None


def imported_modules(module: str, path: str, modules: dict[str, str]) -> list[tuple[str, int]]:
  """(imported module, line) of every import statement in the file, functions included."""
  with open(path, encoding="utf-8") as f:
    tree = ast.parse(f.read(), path)
  is_pkg = path.endswith("__init__.py")
  out = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      out += [(a.name, node.lineno) for a in node.names]
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:
        here = module.split(".") if is_pkg else module.split(".")[:-1]
        here = here[:len(here) - (node.level - 1)]
        base = ".".join(here + ([base] if base else []))
      out.append((base, node.lineno))
      for a in node.names:   # `from ssp_jax import tokenizer` imports the module tokenizer
        if f"{base}.{a.name}" in modules:
          out.append((f"{base}.{a.name}", node.lineno))
  return out


def package_graph() -> dict[str, dict[str, str]]:
  """package -> {imported package: "file:line" of one import that makes the edge}."""
  modules = module_files()
  graph: dict[str, dict[str, str]] = {}
  for module, path in modules.items():
    src = package_of(module, modules)
    graph.setdefault(src, {})
    for target, line in imported_modules(module, path, modules):
      dst = package_of(target, modules)
      if dst is not None and dst != src and not (dst == "ssp_jax" and src.startswith("ssp_jax")):
        graph[src].setdefault(dst, f"{os.path.relpath(path, REPO)}:{line}")
  return graph


def find_cycle(graph: dict[str, dict[str, str]]) -> list[str] | None:
  """One cycle [a, b, ..., a] of the graph, or None."""
  state: dict[str, int] = {}     # 1: on the current path, 2: done
  path: list[str] = []

  def visit(n):
    state[n] = 1
    path.append(n)
    for m in sorted(graph.get(n, {})):
      if state.get(m) == 1:
        return path[path.index(m):] + [m]
      if m not in state:
        found = visit(m)
        if found:
          return found
    path.pop()
    state[n] = 2
    return None

  for n in sorted(graph):
    if n not in state:
      found = visit(n)
      if found:
        return found
  return None


def describe(cycle: list[str], graph) -> str:
  return "; ".join(f"{a} -> {b} ({graph[a][b]})" for a, b in zip(cycle, cycle[1:]))


def test_no_two_packages_import_each_other():
  graph = package_graph()
  cycle = find_cycle(graph)
  assert cycle is None, "packages import each other: " + describe(cycle, graph)


def test_models_and_retrieval_stay_below_ssp_jax():
  graph = package_graph()
  assert not set(graph["models"]) & {"retrieval", "ssp_jax"} and \
      not any(p.startswith("ssp_jax.") for p in graph["models"]), graph["models"]
  assert not any(p == "ssp_jax" or p.startswith("ssp_jax.") for p in graph["retrieval"]), \
      graph["retrieval"]


def test_find_cycle_names_a_cycle():
  assert find_cycle({"a": {"b": "x"}, "b": {"c": "y"}, "c": {}}) is None
  cycle = find_cycle({"a": {"b": "x"}, "b": {"c": "y"}, "c": {"a": "z"}})
  assert cycle == ["a", "b", "c", "a"]
  assert "a -> b (x)" in describe(cycle, {"a": {"b": "x"}, "b": {"c": "y"}, "c": {"a": "z"}})


def test_function_level_imports_are_edges(tmp_path):
  src = tmp_path / "m.py"
  src.write_text("def f():\n  from ssp_jax.ssp import game\n  import retrieval\n")
  modules = module_files()
  got = [m for m, _ in imported_modules("ssp_jax.x.m", str(src), modules)]
  assert "ssp_jax.ssp.game" in got and "retrieval" in got
