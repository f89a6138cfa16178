"""The test suite's time by test and by file, from pytest's --durations.

python -m pytest -n 2 -q --durations=0 > run.txt
python benchmarks/suite_durations.py run.txt [--top 30]

Prints two markdown tables: the slowest tests (setup, call and teardown
summed; a fixture's setup counts for the first test that uses it) and every
file's total, slowest first. pytest hides phases under 0.005 s unless run
with -vv, so the totals miss those.
"""

import argparse
import collections
import pathlib
import re
from collections.abc import Iterable

# One line of pytest's "slowest durations": "12.34s call     tests/x.py::t".
_LINE = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s+(setup|call|teardown)\s+(\S.*)$")


def parse(lines: Iterable[str]) -> dict[str, float]:
    """Seconds per test id (its phases summed) from pytest's output.

    Raises:
      ValueError: when no duration line is found (pytest ran without
        --durations, or the output is not pytest's).
    """
    tests: dict[str, float] = collections.defaultdict(float)
    for line in lines:
        match = _LINE.match(line)
        if match:
            seconds, _, test = match.groups()
            tests[test.strip()] += float(seconds)
    if not tests:
        raise ValueError(
            "no duration lines found: run pytest with --durations=0"
        )
    return dict(tests)


def by_file(tests: dict[str, float]) -> dict[str, float]:
    """Seconds per test file (the test id before '::')."""
    files: dict[str, float] = collections.defaultdict(float)
    for test, seconds in tests.items():
        files[test.split("::", 1)[0]] += seconds
    return dict(files)


def table(rows: dict[str, float], header: str, top: int | None = None) -> str:
    """`rows` as a markdown table, slowest first, with each row's share."""
    total = sum(rows.values())
    ranked = sorted(rows.items(), key=lambda row: -row[1])[:top]
    lines = [f"| {header} | s | share |", "|---|---|---|"]
    lines += [
        f"| `{name}` | {seconds:.1f} | {seconds / total:.1%} |"
        for name, seconds in ranked
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", type=pathlib.Path, help="pytest's output")
    parser.add_argument("--top", type=int, default=30, help="tests listed")
    args = parser.parse_args()
    tests = parse(args.output.read_text().splitlines())
    files = by_file(tests)
    print(
        f"{len(tests)} tests in {len(files)} files, "
        f"{sum(tests.values()):.0f} s summed over the workers\n"
    )
    print(table(tests, f"the {args.top} slowest tests", args.top))
    print()
    print(table(files, "file"))


if __name__ == "__main__":
    main()
