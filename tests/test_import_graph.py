"""The import graph of detector/ and ops/, and what importing costs.

The graph runs one way, and the folders are its layers (docs/architecture.md
draws them): the entry points' plumbing (detector/launch/) and the training
loop (detector/engine/) sit on top; export and evaluation import no training
code; model state and weights (detector/state/) sit on the model
(detector/modeling/), which reads no config; the config schema
(detector/config/) imports nothing of detector/ or ops/; ops/ knows nothing
of detector/, and detector/predict/ (what runs an exported artifact) imports
only detector/imaging/ (host-side pixels) and detector/utils/ (services that
import nothing of detector/) of either. Every import
statement counts, function-level ones included.
"""

import ast
import functools
import pathlib
import subprocess
import sys

import pytest

from tests.helpers import requires

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


@functools.cache
def _parsed_graph() -> tuple[tuple[str, frozenset[str]], ...]:
    """The graph, parsed once per session (every source file's AST)."""
    paths = [p for package in PACKAGES for p in (ROOT / package).rglob("*.py")]
    modules = {_module_name(p) for p in paths}
    return tuple(
        (_module_name(p), frozenset(_imports(p, modules) - {_module_name(p)}))
        for p in paths
    )


def import_graph() -> dict[str, set[str]]:
    """module -> the first-party modules it imports (a fresh copy, which a
    test may change)."""
    return {module: set(targets) for module, targets in _parsed_graph()}


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
    assert "detector.evaluation.eval_lib" in graph["detector.engine.train_lib"]
    cycle = _cycle(graph)
    assert cycle is None, " -> ".join(cycle)


def test_cycle_finder_finds_a_planted_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycle(graph) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def _imports_into(
    graph: dict[str, set[str]], layer: str, forbidden: tuple[str, ...]
) -> dict[str, list[str]]:
    """module of `layer` -> the modules under `forbidden` that it imports."""
    found = {
        module: sorted(t for t in targets if t.startswith(forbidden))
        for module, targets in graph.items()
        if module == layer or module.startswith(layer + ".")
    }
    return {module: targets for module, targets in found.items() if targets}


# The training loop and the entry points' plumbing: nothing below them
# imports these.
_TOP = ("detector.engine", "detector.launch")
# Every package of detector/ (a folder of modules).
_DETECTOR = tuple(
    sorted(
        f"detector.{path.name}"
        for path in (ROOT / "detector").iterdir()
        if path.is_dir() and any(path.glob("*.py"))
    )
)
# Packages that know nothing of the model, its config or its state.
_SERVICES_NEVER = (
    *_TOP,
    "detector.config",
    "detector.data",
    "detector.evaluation",
    "detector.export",
    "detector.modeling",
    "detector.state",
)

# predict/ and the packages under it that it may import.
_PREDICT_MAY_IMPORT = ("detector.predict", "detector.imaging", "detector.utils")

# layer -> the packages it must never import.
LAYER_RULES = {
    "ops": ("detector",),
    # The network itself: built from parts, it reads no config.
    "detector.modeling": (
        *_TOP,
        "detector.config",
        "detector.data",
        "detector.distributed",
        "detector.evaluation",
        "detector.export",
        "detector.state",
        "detector.utils",
    ),
    # The training loop starts no run: the entry points do.
    "detector.engine": ("detector.launch",),
    # Evaluation and export run a trained model: no training code.
    "detector.evaluation": (*_TOP, "detector.export"),
    "detector.export": _TOP,
    # How a run starts: flags, the run's config and its history, the
    # console, and the config checked against every registry below it (so
    # it reads data, modeling, imaging, ops and evaluation's COCOeval
    # backends: evaluation is a layer under it), but it runs no training,
    # export or checkpoint.
    "detector.launch": (
        "detector.engine",
        "detector.export",
        "detector.state",
    ),
    "detector.state": (*_TOP, "detector.evaluation", "detector.export"),
    # The one inference function and the programs compiled per canvas:
    # the model's graph, pixels and the host audit; no run, no checkpoint,
    # no data pipeline (evaluation, export and training all call it).
    "detector.inference": (
        *_TOP,
        "detector.data",
        "detector.evaluation",
        "detector.export",
        "detector.factory",
        "detector.state",
        "detector.weights",
    ),
    # The config mapped onto the model's parts: no run, no checkpoint.
    "detector.factory": (
        *_TOP,
        "detector.evaluation",
        "detector.export",
        "detector.state",
    ),
    # Weight files read and mapped onto the model: no run, no checkpoint.
    "detector.weights": (
        *_TOP,
        "detector.evaluation",
        "detector.export",
        "detector.state",
    ),
    # The schema: defaults, types and ranges; names are checked beside
    # their registries (detector/launch/validate.py). The range types and
    # the ranges predict.json shares are the bottom services' (utils/).
    "detector.config": (
        *(
            p
            for p in _DETECTOR
            if p not in ("detector.config", "detector.utils")
        ),
        "ops",
    ),
    "detector.data": (
        *_TOP,
        "detector.evaluation",
        "detector.export",
        "detector.modeling",
        "detector.state",
    ),
    "detector.distributed": _SERVICES_NEVER,
    # Files written whole, free space, the one-process lock of a folder,
    # progress bars: the standard library, jax and absl, nothing of
    # detector/ (the lock across processes is distributed.run_lock).
    "detector.utils": (
        *(p for p in _DETECTOR if p != "detector.utils"),
        "ops",
    ),
    # Host-side pixels (image files, orientation, the resize rule, canvases,
    # resizing, mask pasting, RLE), used by data, evaluation and predict.py
    # alike: numpy, PIL and jax only.
    "detector.imaging": (
        *(p for p in _DETECTOR if p != "detector.imaging"),
        "ops",
    ),
    # What predict.py --exported runs: numpy, PIL and jax, host-side pixels
    # and the bottom services (outputs written whole, --out locked).
    "detector.predict": (
        *(
            p
            for p in _DETECTOR
            if p
            not in ("detector.predict", "detector.imaging", "detector.utils")
        ),
        "ops",
    ),
}


def _broken_rules(graph: dict[str, set[str]]) -> dict[str, dict]:
    """layer -> {module: the imports of it that LAYER_RULES forbid}, for
    the layers that break a rule."""
    broken = {}
    for layer, forbidden in LAYER_RULES.items():
        if wrong := _imports_into(graph, layer, forbidden):
            broken[layer] = wrong
    return broken


def test_layers_import_only_downwards():
    graph = import_graph()
    assert graph["ops.nms"]  # the graph does see ops' own imports
    assert graph["detector.modeling.model"]
    assert {"detector.modeling", "detector.data"} <= set(_DETECTOR)
    broken = _broken_rules(graph)
    assert not broken, {
        layer: (LAYER_RULES[layer], wrong) for layer, wrong in broken.items()
    }


def test_layer_rules_catch_a_planted_import():
    graph = {
        "detector.modeling.rpn": {"detector.engine.train_lib"},
        "detector.modeling.fpn": {"ops.nms"},
        "detector.data.pipeline": set(),
    }
    assert _imports_into(graph, "detector.modeling", ("detector.engine",)) == {
        "detector.modeling.rpn": ["detector.engine.train_lib"]
    }
    assert not _imports_into(graph, "detector.data", ("detector.modeling",))


@pytest.mark.parametrize(
    "module, planted",
    [
        ("detector.evaluation.eval_lib", "detector.engine.train_lib"),
        ("detector.export.exporter", "detector.engine.train_step"),
        ("detector.export.exporter", "detector.launch.cli"),
        ("detector.evaluation.eval_lib", "detector.launch.config_history"),
        ("detector.modeling.model", "detector.config"),
        ("detector.modeling.model", "detector.state.checkpoint"),
        ("detector.state.train_state", "detector.evaluation.eval_lib"),
        ("detector.distributed.multihost", "detector.state.checkpoint"),
        ("detector.utils.files", "detector.config"),
        ("detector.config.model", "detector.state.optimizer"),
        ("detector.launch.run_config", "detector.engine.train_lib"),
        ("detector.config.model", "detector.modeling.backbone"),
        ("detector.config.data", "detector.data.shapes_writer"),
        ("detector.config", "ops.nms"),
        ("detector.config.eval", "detector.evaluation.coco_backends"),
        ("detector.launch.validate", "detector.export.exporter"),
        ("detector.launch.validate", "detector.state.checkpoint"),
        ("detector.engine.train_lib", "detector.launch.validate"),
    ],
)
def test_the_real_graph_with_a_planted_import_breaks_a_rule(module, planted):
    """Each rule fires on the real graph plus one upward import: the
    planted import itself is reported."""
    graph = import_graph()
    graph[module] = graph[module] | {planted}
    assert any(
        planted in wrong.get(module, ())
        for wrong in _broken_rules(graph).values()
    )


def test_no_package_pair_imports_both_ways():
    """The folder graph has no two-way arrow: package A imports B and B
    imports A (detector's sub-packages and ops)."""
    packages: dict[tuple[str, str], int] = {}
    for module, targets in import_graph().items():
        for target in targets:
            edge = (_package(module), _package(target))
            if edge[0] != edge[1]:
                packages[edge] = 1
    both = sorted((a, b) for a, b in packages if (b, a) in packages and a < b)
    assert not both, both


def _package(module: str) -> str:
    """'detector.state.checkpoint' -> 'detector.state'; 'ops.nms.x' -> 'ops'."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "detector" else parts[0]


def package_pairs(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """Unordered pairs {A, B} of detector/'s packages with an import from
    one to the other, either way (ops/ and detector/__init__ not counted)."""
    return {
        frozenset((_package(module), _package(target)))
        for module, targets in graph.items()
        for target in targets
        if _package(module) != _package(target)
        and _package(module).startswith("detector.")
        and _package(target).startswith("detector.")
    }


# Pairs of detector/'s 15 packages and factory.py joined by an import: 48.
# Each is a dependency to justify; the newest: engine-, evaluation- and
# export-inference (the one inference function and the programs compiled
# per canvas, which all three run), imaging-inference (the detections
# contract and the canvases), inference-state (a restore of the weights
# alone gives inference's Weights), config-data (the pipeline
# makes the GT mask layout and shape the schema states for the model's mask
# target rule, config/data.py MASK_LAYOUTS), config-state (state compares
# a checkpoint's config with config_diff), config-utils (predict.json's
# checks share the config's ranges), engine-imaging (the canvases of the
# train programs), evaluation-modeling (curves.png plots the model's loss
# names).
MAX_PACKAGE_PAIRS = 48


def test_few_package_pairs_are_joined():
    pairs = package_pairs(import_graph())
    assert len(pairs) <= MAX_PACKAGE_PAIRS, sorted(map(sorted, pairs))


def test_package_pairs_count_each_pair_once():
    graph = {
        "detector.a.x": {"detector.b.y", "detector.a.z", "ops.nms"},
        "detector.b.y": {"detector.a.x"},
        "detector.b.w": {"detector.c"},
    }
    assert package_pairs(graph) == {
        frozenset(("detector.a", "detector.b")),
        frozenset(("detector.b", "detector.c")),
    }


def _third_party_imports(path: pathlib.Path) -> set[str]:
    """Top-level names of every module `path` imports."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_the_model_reads_no_config():
    """modeling/ takes constructor arguments: no ml_collections import."""
    wrong = {
        str(path.relative_to(ROOT)): "ml_collections"
        for path in (ROOT / "detector" / "modeling").rglob("*.py")
        if "ml_collections" in _third_party_imports(path)
    }
    assert not wrong, wrong


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


@requires.modules("pycocotools")  # shapes.py encodes masks with it
def test_shapes_writer_imports_no_tensorflow():
    """`python -m detector.data.shapes_writer` runs without TensorFlow."""
    assert _python(
        "import sys, detector.data.shapes_writer\n"
        "print('tensorflow' in sys.modules)"
    ).split() == ["False"]


@requires.modules("tensorflow", "tensorflow_datasets", "pycocotools")
def test_importing_the_pipeline_registers_no_exit_hook():
    """The exit hook (and hiding GPUs from TF) wait for the first dataset."""
    counts = _python(
        "import atexit, jax, tensorflow, tensorflow_datasets, pycocotools"
        ".coco\nbefore = atexit._ncallbacks()\n"
        "import detector.data.pipeline\n"
        "print(atexit._ncallbacks() - before)"
    )
    assert counts.split() == ["0"]
