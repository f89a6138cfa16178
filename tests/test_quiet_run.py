"""The test command's own output: third-party noise filtered or silenced."""

import pathlib
import subprocess
import sys
import tomllib
import warnings

import numpy as np
import pytest
from _pytest.config import parse_warning_filter

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _ini_filters() -> list[str]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        options = tomllib.load(f)["tool"]["pytest"]["ini_options"]
    return options["filterwarnings"]


def _recorded(action) -> list[warnings.WarningMessage]:
    """Warnings `action` raises past the pytest config's filters."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for spec in _ini_filters():  # later ones win, as in pytest
            warnings.filterwarnings(*parse_warning_filter(spec, escape=False))
        action()
    return caught


def test_pycocotools_numpy2_deprecation_is_filtered():
    mask = pytest.importorskip("pycocotools.mask")
    rle = mask.encode(np.asfortranarray(np.ones((4, 4), np.uint8)))
    assert _recorded(lambda: mask.decode(rle)) == []


def test_load_module_deprecation_is_filtered():
    def warn():
        warnings.warn(
            "the load_module() method is deprecated and slated for removal "
            "in Python 3.12; use exec_module() instead",
            DeprecationWarning,
            stacklevel=1,
        )

    assert _recorded(warn) == []


def test_project_warnings_still_show():
    def warn():
        warnings.warn("detector: something", DeprecationWarning, stacklevel=1)

    assert len(_recorded(warn)) == 1


@pytest.mark.slow  # a fresh TensorFlow import: 15-40 s
def test_tensorflow_imports_without_native_lines():
    pytest.importorskip("tensorflow")
    code = (
        "from tests.helpers import quiet_run; quiet_run.install(); "
        "import tensorflow as tf; tf.constant(1) + 1"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


# package -> the lines that make it register its gc callback.
_GC_CALLBACK_SETUPS = {
    "hypothesis": (
        "from hypothesis.internal.conjecture import junkdrawer\n"
        "junkdrawer.gc_cumulative_time()\n"
    ),
    "jax": "import jax\n",
}


@pytest.mark.parametrize("package", sorted(_GC_CALLBACK_SETUPS))
def test_a_packages_gc_callback_is_dropped(package):
    code = (
        "import gc\n"
        + _GC_CALLBACK_SETUPS[package]
        + "from tests.helpers import quiet_run\n"
        "assert quiet_run.drop_gc_callbacks() == 1\n"
        "assert not [c for c in gc.callbacks\n"
        f"            if c.__module__.startswith({package!r})]\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
