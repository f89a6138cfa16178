"""detector/launch/flag_types.py: `~` in a path flag is the home folder,
in every path flag of every entry point."""

import pathlib
import subprocess
import sys

import pytest
from absl import flags

from detector.launch import flag_types

ROOT = pathlib.Path(__file__).resolve().parents[3]


def test_a_path_flag_expands_the_home_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    values = flags.FlagValues()
    holder = flag_types.define_path("out", None, "", flag_values=values)
    values(["prog", "--out=~/x"])
    assert holder.value == f"{tmp_path}/x"
    values(["prog", "--out=a/~/b"])  # only a leading ~ is the home folder
    assert holder.value == "a/~/b"


def test_an_unknown_user_is_one_line():
    values = flags.FlagValues()
    flag_types.define_path("out", None, "", flag_values=values)
    with pytest.raises(flags.IllegalFlagValueError) as info:
        values(["prog", "--out=~no_such_user_here/x"])
    assert str(info.value) == (
        "flag --out=~no_such_user_here/x: ~no_such_user_here names no home "
        "folder (no such user, or no $HOME); write the folder out in full"
    )


# Every flag of an entry point that names a file or folder.
PATH_FLAGS = {
    "train.py": ("workdir",),
    "eval.py": ("workdir",),
    "export.py": ("workdir", "out"),
    "predict.py": ("workdir", "exported", "out"),
}


def _flag_parsers(script: str) -> dict[str, str]:
    """Flag name -> its parser's class name, of entry point `script`
    imported alone in a fresh interpreter (absl flags are global)."""
    probe = (
        "import runpy\n"
        "from absl import flags\n"
        f"runpy.run_path({script!r}, run_name='probe')\n"
        "for name, flag in sorted(flags.FLAGS._flags().items()):\n"
        "    print(name, type(flag.parser).__name__)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=ROOT,
    ).stdout
    return dict(line.split() for line in out.splitlines())


@pytest.mark.parametrize("script", sorted(PATH_FLAGS))
def test_every_path_flag_of_every_entry_point_is_a_path_flag(script):
    """A new path flag defined with DEFINE_string fails here."""
    parsers = _flag_parsers(script)
    for name in PATH_FLAGS[script]:
        assert parsers[name] == "PathParser", (script, name)
    if script == "predict.py":
        assert parsers["score_threshold"] == "FiniteFloatParser"


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf"])
def test_a_bounded_float_flag_refuses_what_is_not_finite(value):
    values = flags.FlagValues()
    flag_types.define_float(
        "score_threshold",
        None,
        "",
        lower_bound=0.0,
        upper_bound=1.0,
        flag_values=values,
    )
    with pytest.raises(flags.IllegalFlagValueError) as info:
        values(["prog", f"--score_threshold={value}"])
    assert str(info.value) == (
        f"flag --score_threshold={value}: {value} is not a finite number"
    )


def test_a_bounded_float_flag_keeps_its_bounds():
    values = flags.FlagValues()
    holder = flag_types.define_float(
        "x", None, "", lower_bound=0.0, upper_bound=1.0, flag_values=values
    )
    values(["prog", "--x=0.25"])
    assert holder.value == 0.25
    with pytest.raises(flags.IllegalFlagValueError, match="in the range"):
        values(["prog", "--x=1.5"])
