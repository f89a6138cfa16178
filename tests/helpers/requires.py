"""Skip guards for tests that need an optional library, and a blocker that
makes installed libraries look missing.

GPU images often come without TensorFlow, pycocotools or clu. A test that
needs one skips with a reason naming it instead of failing:

    requires.module_or_skip(*requires.TRAIN_LOOP)   # at a module's top
    @requires.modules("pycocotools")                # on one test

`DETECTOR_TEST_BLOCK=tensorflow,pycocotools,clu` makes tests/conftest.py
`block` those top-level packages, so the suite runs as on such an image
(tests/test_requires.py does).
"""

import importlib.util
import os
import sys

import pytest

# What the training loop and the entry points import: tf.data batches,
# pycocotools evaluation, clu's writers.
TRAIN_LOOP = ("tensorflow", "pycocotools", "clu")
# The environment variable tests/conftest.py reads.
BLOCK_ENV = "DETECTOR_TEST_BLOCK"


def block(packages: tuple[str, ...]) -> None:
    """Makes `packages` look not installed for the rest of the process:
    `import` raises ModuleNotFoundError and `importlib.util.find_spec`
    returns None, as where they are missing (a None in sys.modules)."""
    for name in packages:
        if sys.modules.get(name) is not None:
            raise RuntimeError(f"{name} is already imported; block it sooner")
        sys.modules[name] = None


def block_from_env(env=os.environ) -> tuple[str, ...]:
    """Blocks the packages $DETECTOR_TEST_BLOCK lists (comma-separated);
    returns them."""
    names = tuple(
        n.strip() for n in env.get(BLOCK_ENV, "").split(",") if n.strip()
    )
    block(names)
    return names


def missing(*names: str) -> list[str]:
    """The modules of `names` that cannot be found (not installed or
    blocked); nothing is imported."""
    absent = []
    for name in names:
        try:
            found = importlib.util.find_spec(name) is not None
        except ImportError:  # a parent package is missing
            found = False
        if not found:
            absent.append(name)
    return absent


def _reason(absent: list[str]) -> str:
    return f"not installed: {', '.join(absent)}"


def modules(*names: str) -> pytest.MarkDecorator:
    """A skipif mark: skip unless every module of `names` is installed."""
    absent = missing(*names)
    return pytest.mark.skipif(bool(absent), reason=_reason(absent))


def module_or_skip(*names: str) -> None:
    """At a test module's top: skips the whole module unless every module
    of `names` imports."""
    absent = missing(*names)
    if absent:
        pytest.skip(_reason(absent), allow_module_level=True)
    for name in names:  # installed but broken: skip as importorskip would
        pytest.importorskip(name)
