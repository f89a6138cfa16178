"""The code's shape: module docstring lengths, package pairs joined by an
import, the config's path through the calls, MaskRCNN's constructor.

python benchmarks/code_stats.py [--paths detector/data/lsj.py ...]
"""

import argparse
import ast
import pathlib
import statistics
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks import config_flow  # noqa: E402
from tests import test_import_graph  # noqa: E402

PACKAGES = ("detector", "ops")


def docstring_lines(path: pathlib.Path) -> int:
    """Lines of the module docstring, quotes included (0 where none)."""
    tree = ast.parse(path.read_text(), str(path))
    first = tree.body[0] if tree.body else None
    if not (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        return 0
    return first.end_lineno - first.lineno + 1


def package_of(path: pathlib.Path) -> str:
    """'detector/data/sources/x.py' -> 'detector/data'; 'ops/...' -> 'ops'."""
    parts = path.relative_to(ROOT).parts
    if parts[0] == "detector" and len(parts) > 2:
        return "/".join(parts[:2])
    return parts[0]


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--paths",
        nargs="*",
        type=pathlib.Path,
        help="also list these files' docstring lines",
    )
    args = parser.parse_args(argv)
    files = sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))
    lines = {p: docstring_lines(p) for p in files}
    print(
        f"median module docstring lines: {statistics.median(lines.values()):g}"
        f" over {len(lines)} modules of {', '.join(PACKAGES)}"
    )
    print(f"{'package':<24} {'modules':>7} {'median':>7} {'max':>5}")
    packages: dict[str, list[int]] = {}
    for path, count in lines.items():
        packages.setdefault(package_of(path), []).append(count)
    for name, counts in sorted(packages.items()):
        print(
            f"{name:<24} {len(counts):>7} {statistics.median(counts):>7g}"
            f" {max(counts):>5}"
        )
    for path in args.paths or ():
        print(f"{path}: {docstring_lines(path.resolve())}")
    graph = test_import_graph.import_graph()
    packages = {test_import_graph._package(m) for m in graph}
    detector = sorted(p for p in packages if p.startswith("detector."))
    pairs = test_import_graph.package_pairs(graph)
    possible = len(detector) * (len(detector) - 1) // 2
    print(
        f"detector/ package pairs joined by an import: {len(pairs)} of "
        f"{possible} ({len(detector)} packages)"
    )
    visited, steps, climbs = config_flow.trace(ROOT)
    print(
        f"config from train_and_evaluate: {len(visited)} modules, "
        f"{len(steps)} cross-module calls, {len(climbs)} into a higher layer"
    )
    for caller, callee in climbs:
        print(f"  climbs: {caller} -> {callee}")
    print(
        "MaskRCNN.__init__ arguments besides rngs: "
        f"{constructor_arguments(ROOT / 'detector/modeling/model.py')}"
    )


def constructor_arguments(path: pathlib.Path, name: str = "MaskRCNN") -> int:
    """Arguments of class `name`'s __init__ in `path`, self and rngs out."""
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == name:
            for item in node.body:
                if (
                    isinstance(item, ast.FunctionDef)
                    and item.name == "__init__"
                ):
                    args = item.args
                    names = [
                        a.arg
                        for a in args.posonlyargs + args.args + args.kwonlyargs
                    ]
                    return len([n for n in names if n not in ("self", "rngs")])
    raise ValueError(f"{path}: no class {name} with an __init__")


if __name__ == "__main__":
    main(sys.argv[1:])
