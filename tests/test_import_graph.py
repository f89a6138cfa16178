"""The import graph of detector/ and ops/, and what importing costs.

The graph runs one way (entry points -> train_lib -> eval_lib -> model ->
ops); ops/ knows nothing of detector/. Every import statement counts,
function-level ones included.
"""

import ast
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("detector", "ops")


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: pathlib.Path, modules: set[str]) -> set[str]:
    """First-party modules that `path` imports (a name inside a module counts
    as an import of that module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
            names = [n if n in modules else node.module for n in names]
        else:
            continue
        found.update(n for n in names if n in modules)
    return found


def import_graph() -> dict[str, set[str]]:
    """module -> the first-party modules it imports."""
    paths = [p for package in PACKAGES for p in (ROOT / package).rglob("*.py")]
    modules = {_module_name(p) for p in paths}
    return {
        _module_name(p): _imports(p, modules) - {_module_name(p)} for p in paths
    }


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of `graph`, or None."""
    state: dict[str, str] = {}  # module -> 'open' | 'done'
    stack: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = "open"
        stack.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                return stack[stack.index(target) :] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        stack.pop()
        state[module] = "done"
        return None

    for module in sorted(graph):
        if module not in state and (cycle := visit(module)):
            return cycle
    return None


def test_import_graph_has_no_cycle():
    graph = import_graph()
    assert "detector.eval_lib" in graph["detector.train_lib"]
    cycle = _cycle(graph)
    assert cycle is None, " -> ".join(cycle)


def test_cycle_finder_finds_a_planted_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycle(graph) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_ops_imports_nothing_from_detector():
    graph = import_graph()
    assert graph["ops.nms"]  # the graph does see ops' own imports
    wrong = {
        module: sorted(t for t in targets if t.startswith("detector"))
        for module, targets in graph.items()
        if module.startswith("ops")
    }
    assert not any(wrong.values()), wrong


def _python(code: str) -> str:
    """Runs `code` in a fresh interpreter; returns its stdout."""
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def test_shapes_writer_imports_no_tensorflow():
    """`python -m detector.data.shapes` runs without TensorFlow."""
    assert _python(
        "import sys, detector.data.shapes; print('tensorflow' in sys.modules)"
    ).split() == ["False"]


def test_importing_the_pipeline_registers_no_exit_hook():
    """The exit hook (and hiding GPUs from TF) wait for the first dataset."""
    counts = _python(
        "import atexit, jax, tensorflow, tensorflow_datasets, pycocotools"
        ".coco\nbefore = atexit._ncallbacks()\n"
        "import detector.data.pipeline\n"
        "print(atexit._ncallbacks() - before)"
    )
    assert counts.split() == ["0"]
