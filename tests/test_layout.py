"""The house rules, checked: no import cycle inside glance_jax/, neither between modules nor between
its folders (counting imports inside functions too, since a lazy import still ties two modules
together), and no file over 500 lines in glance_jax/ or benchmarks/.

Folders are layers: glance_jax.decode stands on the model alone (qwen3_vl, head), never on bench/,
testbed/ or train/, which stand on it. A package-level cycle (decode -> bench -> decode) is a
layering error even where no two modules import each other.

`python tests/test_layout.py [ROOT]` prints the import graph (module -> the glance_jax modules it
imports), the package graph and its cycles, and the longest files, for this checkout or another.
"""

from __future__ import annotations

import ast
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = "glance_jax"
MAX_LINES = 500


def _module_name(path: pathlib.Path, root: pathlib.Path = ROOT) -> str:
  parts = path.relative_to(root).with_suffix("").parts
  return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: pathlib.Path = ROOT) -> dict[str, set[str]]:
  """{module: glance_jax modules it imports}. `from P import n` counts as P.n when that is a module,
  else P; a package's own __init__ is not counted as imported by its submodules."""
  files = {_module_name(p, root): p for p in sorted((root / PACKAGE).rglob("*.py"))}
  graph: dict[str, set[str]] = {}
  for name, path in files.items():
    is_package = path.name == "__init__.py"
    edges = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
      targets = []
      if isinstance(node, ast.Import):
        targets = [a.name for a in node.names]
      elif isinstance(node, ast.ImportFrom):
        if node.level:  # relative: resolve against this module's package
          base = name.split(".") if is_package else name.split(".")[:-1]
          base = base[:len(base) - node.level + 1]
          module = ".".join(base + ([node.module] if node.module else []))
        else:
          module = node.module or ""
        targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in files else module
                   for a in node.names]
      for target in targets:
        while target and target not in files:  # `import glance_jax.x.y` names glance_jax.x.y
          target = target.rpartition(".")[0]
        if target.startswith(PACKAGE) and target != name:
          edges.add(target)
    graph[name] = edges
  return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
  """Strongly connected components with more than one module (Tarjan), each sorted."""
  index, low, stack, on_stack, out = {}, {}, [], set(), []

  def visit(v):
    index[v] = low[v] = len(index)
    stack.append(v)
    on_stack.add(v)
    for w in graph.get(v, ()):
      if w not in index:
        visit(w)
        low[v] = min(low[v], low[w])
      elif w in on_stack:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      component = []
      while True:
        w = stack.pop()
        on_stack.discard(w)
        component.append(w)
        if w == v:
          break
      if len(component) > 1:
        out.append(sorted(component))

  sys.setrecursionlimit(10000)
  for v in sorted(graph):
    if v not in index:
      visit(v)
  return out


def package_of(module: str) -> str | None:
  """glance_jax.decode.loop -> glance_jax.decode; a top-level module (glance_jax.config) is its own
  node; the root package (the public API, importing everything) is none."""
  parts = module.split(".")
  return None if len(parts) < 2 else ".".join(parts[:2])


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
  """{folder: the folders its modules import}, from the module graph."""
  out: dict[str, set[str]] = {}
  for module, edges in graph.items():
    src = package_of(module)
    if src is None:
      continue
    deps = out.setdefault(src, set())
    deps.update(p for p in map(package_of, edges) if p is not None and p != src)
  return out


def line_counts(root: pathlib.Path = ROOT) -> dict[str, int]:
  paths = [*(root / PACKAGE).rglob("*.py"), *(root / "benchmarks").rglob("*.py")]
  return {str(p.relative_to(root)): len(p.read_text().splitlines()) for p in paths}


def test_no_import_cycles():
  graph = import_graph()
  assert len(graph) > 50 and graph["glance_jax.head.init"] >= {"glance_jax.head.checkpoint",
                                                                "glance_jax.head.model"}
  found = cycles(graph)
  assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_cycle_finder_finds_a_planted_cycle():
  graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
  assert cycles(graph) == [["a", "b", "c"]]


def test_no_package_import_cycles():
  """No folder of glance_jax imports a folder that imports it back (the old tree had decode <-> bench
  and decode <-> testbed: `python tests/test_layout.py OLD_CHECKOUT` lists them)."""
  packages = package_graph(import_graph())
  assert {"glance_jax.decode", "glance_jax.bench", "glance_jax.qwen3_vl"} <= set(packages)
  found = cycles(packages)
  assert not found, "package import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_decode_stands_on_the_model_alone():
  packages = package_graph(import_graph())
  above = {"glance_jax.bench", "glance_jax.cli", "glance_jax.testbed", "glance_jax.train", "glance_jax.aot",
           "glance_jax.analysis", "glance_jax.data", "glance_jax.testing", "glance_jax.demo"}
  assert not packages["glance_jax.decode"] & above, packages["glance_jax.decode"] & above


def test_package_cycle_is_found_where_modules_have_none():
  graph = {"glance_jax.a.x": {"glance_jax.b.y"}, "glance_jax.b.z": {"glance_jax.a.w"}, "glance_jax.a.w": set(),
           "glance_jax.b.y": set(), "glance_jax": {"glance_jax.a.x"}}
  assert cycles(graph) == []
  assert cycles(package_graph(graph)) == [["glance_jax.a", "glance_jax.b"]]


def test_no_file_over_500_lines():
  long = {p: n for p, n in line_counts().items() if n > MAX_LINES}
  assert not long, f"files over {MAX_LINES} lines: {long}"


def test_pyproject_ships_every_package():
  """pyproject.toml lists its packages by hand (the testbed's data package needs a package-dir), so a
  new sub-package that is not added there would be missing from `pip install .`."""
  import tomllib
  listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
  on_disk = {_module_name(p) for p in (ROOT / PACKAGE).rglob("__init__.py")}
  assert on_disk <= listed, f"pyproject.toml [tool.setuptools] packages misses {sorted(on_disk - listed)}"


if __name__ == "__main__":
  root = pathlib.Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT
  graph = import_graph(root)
  for module in sorted(graph):
    print(f"{module} -> {', '.join(sorted(graph[module])) or '-'}")
  print(f"\n{len(graph)} modules, {sum(map(len, graph.values()))} edges, cycles: {cycles(graph)}")
  packages = package_graph(graph)
  for p in sorted(packages):
    print(f"{p} -> {', '.join(sorted(packages[p])) or '-'}")
  print(f"package cycles: {cycles(packages)}")
  counts = sorted(line_counts(root).items(), key=lambda kv: -kv[1])
  print("longest files:", ", ".join(f"{p} ({n})" for p, n in counts[:5]))
