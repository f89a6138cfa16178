"""benchmarks/suite_durations.py: pytest's --durations by test and file."""

import pytest

from benchmarks import suite_durations

_OUTPUT = """\
============================= slowest durations =============================
12.50s call     tests/a/test_x.py::test_one[pallas-0.5 big]
2.00s setup    tests/a/test_x.py::test_one[pallas-0.5 big]
3.00s call     tests/b/test_y.py::test_two
0.50s teardown tests/a/test_x.py::test_three
1062 passed, 42 skipped in 918.00s (0:15:18)
"""


def test_phases_add_up_per_test_and_per_file():
    tests = suite_durations.parse(_OUTPUT.splitlines())
    assert tests == {
        "tests/a/test_x.py::test_one[pallas-0.5 big]": 14.5,
        "tests/b/test_y.py::test_two": 3.0,
        "tests/a/test_x.py::test_three": 0.5,
    }
    assert suite_durations.by_file(tests) == {
        "tests/a/test_x.py": 15.0,
        "tests/b/test_y.py": 3.0,
    }


def test_table_ranks_slowest_first_and_cuts_at_top():
    text = suite_durations.table({"a": 1.0, "b": 3.0}, "test", top=1)
    assert text.splitlines() == [
        "| test | s | share |",
        "|---|---|---|",
        "| `b` | 3.0 | 75.0% |",
    ]


def test_output_without_durations_is_one_error():
    with pytest.raises(ValueError, match="run pytest with --durations=0"):
        suite_durations.parse(["3 passed in 1.00s"])
