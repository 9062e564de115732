"""The package's layering: data flows one way, and the runtime sits on the ground floor."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "moegen"
GENERATOR_ONLY = {"moegen.build", "moegen.render", "moegen.tune", "moegen.arch", "moegen.kernel_sets",
                  "moegen.profiler", "moegen.bench", "jinja2"}


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def imports_of(path: Path, lazy: bool = False) -> set[str]:
    """moegen modules imported at module level, or (lazy) anywhere, function bodies included."""
    tree = ast.parse(path.read_text())
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rsplit(".", 1)[0]
    out = set()
    for node in (ast.walk(tree) if lazy else tree.body):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("moegen"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("moegen"):
                names = [f"{target}.{a.name}" for a in node.names]
                modules = {n for n in names if (PACKAGE.parent / Path(*n.split("."))).with_suffix(".py").exists()
                           or (PACKAGE.parent / Path(*n.split(".")) / "__init__.py").exists()}
                out.update(modules or {target})
    return out


GRAPH = {module_name(p): imports_of(p) for p in PACKAGE.rglob("*.py")}
LAZY_GRAPH = {module_name(p): imports_of(p, lazy=True) for p in PACKAGE.rglob("*.py")}
# What the runtime may reach, lazily or not: spec, artifact (manifest, ABI, hashing), dispatch, the ctypes
# binding, and the pure weight-layout code that `prepare` runs on the GPU at load time.
RUNTIME_MAY_REACH = {"moegen", "moegen.spec", "moegen.paths", "moegen.problem", "moegen.naming", "moegen.artifact",
                     "moegen.dispatch", "moegen.binding", "moegen.layout", "moegen.prepare", "moegen.fp8",
                     "moegen.mxfp4", "moegen.mxfp8", "moegen.routing", "moegen.runtime"}


def reach(module: str, graph: dict) -> set[str]:
    reached, todo = set(), [module]
    while todo:
        m = todo.pop()
        for dep in graph.get(m, ()):
            if dep not in reached:
                reached.add(dep)
                todo.append(dep)
    return reached


def test_no_import_cycles():
    seen, stack = set(), []

    def visit(m):
        if m in stack:
            pytest.fail("import cycle: " + " -> ".join(stack[stack.index(m):] + [m]))
        if m in seen:
            return
        stack.append(m)
        for dep in GRAPH.get(m, ()):
            visit(dep)
        stack.pop()
        seen.add(m)

    for m in GRAPH:
        visit(m)


@pytest.mark.parametrize("ground", ["moegen.runtime", "moegen.artifact", "moegen.dispatch", "moegen.binding",
                                    "moegen.layout", "moegen.spec", "moegen.problem", "moegen.naming"])
def test_ground_floor_imports_no_generator_module(ground):
    reached = reach(ground, GRAPH)
    assert not reached & GENERATOR_ONLY, f"{ground} reaches {sorted(reached & GENERATOR_ONLY)}"


@pytest.mark.parametrize("ground", ["moegen.runtime", "moegen.routing"])
def test_the_runtime_reaches_only_its_allowlist_even_lazily(ground):
    assert sorted(reach(ground, LAZY_GRAPH) - RUNTIME_MAY_REACH) == []


def test_loading_the_runtime_imports_no_build_render_or_tune():
    code = ("import sys, moegen.runtime, moegen.routing; "
            "bad = sorted(m for m in sys.modules if m in %r); print(bad); sys.exit(1 if bad else 0)" % sorted(GENERATOR_ONLY))
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PACKAGE.parent)
    assert run.returncode == 0, run.stdout + run.stderr
