"""Test modules that must share a pytest-xdist worker.

A module- or session-scoped fixture is built once per worker that runs a
test using it (a program is compiled once per session: the workers share
tests/helpers/compilation_cache.py's folder). Under `-n N` the suite
distributes as `--dist=loadgroup` (tests/conftest.py): xdist runs all
tests of one group on one worker, so such a fixture is built once:

    pytestmark = groups.EXPORTED   # at a module's top
"""

import pytest

# conftest.py's trained_workdir and exported_dir (the export tests).
EXPORTED = pytest.mark.xdist_group("exported")
# Their twins on orientation canvases, grouped_workdir and
# grouped_exported_dir: a group of their own, beside EXPORTED's on the
# other worker.
GROUPED_EXPORTED = pytest.mark.xdist_group("grouped_exported")
# The training loop on the tiny shapes config and its trained runs
# (tests/detector/engine/test_train_lib.py).
TINY_SHAPES_TRAINING = pytest.mark.xdist_group("tiny_shapes_training")
# The fine-tune runs of state/test_warm_start.py: a group of their own, so
# the two largest in-process training modules run side by side; the train
# step they share is one program of the session's compilation cache.
WARM_START = pytest.mark.xdist_group("warm_start")
# tests/detector/modeling/test_model.py's compiled steps and predictors.
MODEL = pytest.mark.xdist_group("model")
# tests/detector/evaluation/test_eval_canvases.py's two evaluations (its
# module fixture): split across the workers, both built them.
EVAL_CANVASES = pytest.mark.xdist_group("eval_canvases")
# tests/test_smoke_console.py's smoke run of train.py.
SMOKE_CONSOLE = pytest.mark.xdist_group("smoke_console")
