"""Module docstring lengths over detector/ and ops/: the median, per package.

python benchmarks/code_stats.py [--paths detector/data/lsj.py ...]
"""

import argparse
import ast
import pathlib
import statistics
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
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


if __name__ == "__main__":
    main(sys.argv[1:])
