"""Session-wide test setup: GPU sharing, determinism, a compilation cache.

Before JAX starts a backend (this file is imported before any test):
- XLA_PYTHON_CLIENT_PREALLOCATE=false: each JAX process takes GPU memory as
  it needs it instead of 75% of the card up front, so parallel pytest
  workers (`-n 8`) share one GPU.
- XLA's deterministic GPU ops (detector/distributed/determinism.py),
  appended to any XLA_FLAGS: the backend-identity tests compare programs
  bit for bit, which on a GPU holds only with deterministic reductions. No
  effect on CPU.
- On a CPU-only install, programs compile without LLVM's backend
  optimisation (tests/helpers/cpu_compiles.py), as the processes the tests
  start always have.

torch never shares a process with TensorFlow (importing triton there
crashes): a test marked `imports_torch` (tests/helpers/torch_process.py)
runs whole in a child pytest with TensorFlow blocked, and a test after
which both are imported fails.

`DETECTOR_TEST_BLOCK=tensorflow,pycocotools,clu` makes those packages
unimportable for the session (tests/helpers/requires.py), as on an image
that lacks them: the tests that need them skip.

Several tests compile the same programs (a train step resumed from a
checkpoint, the same model under another test, the smoke config in the
processes tests start); one JAX persistent cache for the session, shared by
the xdist workers and the processes they start, makes every compile after
the first a lookup (tests/helpers/compilation_cache.py).
"""

import json
import os

from detector.distributed import determinism
from tests.helpers import cpu_compiles, quiet_run, requires, torch_process

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
os.environ["XLA_FLAGS"] = determinism.with_flag(os.environ.get("XLA_FLAGS"))
os.environ["XLA_FLAGS"] = cpu_compiles.with_flag(os.environ["XLA_FLAGS"])

import pytest

from tests.helpers import compilation_cache as compilation_cache_lib

# $DETECTOR_TEST_BLOCK=tensorflow,pycocotools,clu: the session runs as on an
# image without them. Here, before the conftest files below this folder and
# the test modules can import them.
requires.block_from_env()
# TensorFlow's import-time native lines off (tests/helpers/quiet_run.py).
quiet_run.install()


def pytest_configure(config):
    """`-n N` distributes as `--dist=loadgroup`, not `load`: the modules of a
    group in tests/helpers/groups.py share one worker."""
    if getattr(config.option, "dist", None) == "load":  # xdist's controller
        config.option.dist = "loadgroup"
    if getattr(config, "workerinput", {}).get("loadgroup"):  # a worker
        config.option.loadgroup = True  # test ids name their group


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """Each xdist worker learns that the run distributes by group."""
    node.workerinput["loadgroup"] = node.config.option.dist == "loadgroup"


def pytest_sessionfinish(session, exitstatus):
    """hypothesis' gc callback out before xdist stops this worker."""
    del session, exitstatus
    quiet_run.drop_gc_callbacks()


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    """An `imports_torch` test runs in a child pytest (module docstring)."""
    marked = pyfuncitem.get_closest_marker(torch_process.IN_CHILD_MARK)
    if marked is None or torch_process.in_child():
        return None
    torch_process.run_test(pyfuncitem.nodeid)
    return True


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    """Fails the test after which torch and TensorFlow share the process."""
    yield
    if torch_process.shares_process_with_tensorflow():
        pytest.fail(
            f"{item.nodeid}: torch and TensorFlow are both imported in one "
            "process; mark the test torch_process.imports_torch"
        )


@pytest.fixture(scope="session", autouse=True)
def compilation_cache(tmp_path_factory):
    """The session's one compilation cache (module docstring)."""
    compilation_cache_lib.install(
        compilation_cache_lib.session_dir(tmp_path_factory)
    )


@pytest.fixture(scope="session")
def trained_workdir(tmp_path_factory):
    """A shapes workdir with checkpoint predict_workdir.STEP (not trained:
    tests/helpers/predict_workdir.py), shared by the export tests."""
    from tests.helpers import predict_workdir

    workdir = tmp_path_factory.mktemp("predict") / "run"
    predict_workdir.make(workdir)
    return workdir


def _export(workdir):
    """`workdir` exported for cpu, cuda and tpu in one artifact, into
    workdir/export."""
    from detector import config as config_lib
    from detector.export import exporter

    out = workdir / "export"
    config = config_lib.load_json(workdir / "config.json")
    exporter.export_workdir(
        config, workdir, out, platforms=("cpu", "cuda", "tpu")
    )
    return out


@pytest.fixture(scope="session")
def exported_dir(trained_workdir):
    """trained_workdir exported for cpu, cuda and tpu in one artifact."""
    return _export(trained_workdir)


@pytest.fixture(scope="session")
def format_2_exported_dir(trained_workdir, exported_dir):
    """trained_workdir exported as format 2 wrote it, for cpu: its one
    function holds the weights (constants), no weights section."""
    from detector import config as config_lib
    from detector.export import exporter
    from detector.predict import artifact

    config = config_lib.load_json(trained_workdir / "config.json")
    model = exporter.served(config, trained_workdir)
    meta = json.loads((exported_dir / artifact.META_FILE).read_text())
    (canvas,) = meta["canvases"]
    function = exporter.export_fn(
        lambda *inputs: model.fn(model.weights, *inputs), canvas, ("cpu",)
    )
    data = bytes(function.serialize())
    del meta["weights_bytes"]
    meta |= {
        "format_version": 2,
        "canvas_bytes": [len(data)],
        "platforms": ["cpu"],
        "nms_backend": {"cpu": meta["nms_backend"]["cpu"]},
        "sha256": artifact.sha256(data),
    }
    out = trained_workdir / "export_format_2"
    out.mkdir()
    (out / artifact.ARTIFACT_FILE).write_bytes(data)
    (out / artifact.META_FILE).write_text(json.dumps(meta))
    return out


@pytest.fixture(scope="session")
def grouped_workdir(tmp_path_factory):
    """A workdir of the grouped config (landscape and portrait canvases,
    not trained: tests/helpers/predict_workdir.py) whose data.root's "val"
    holds images of both orientations."""
    pytest.importorskip("pycocotools.mask")  # the folder's annotations
    from tests.helpers import predict_workdir

    root = tmp_path_factory.mktemp("grouped")
    predict_workdir.make_grouped(root / "run", root / "data")
    return root / "run"


@pytest.fixture(scope="session")
def grouped_exported_dir(grouped_workdir):
    """grouped_workdir exported for cpu, cuda and tpu in one artifact."""
    return _export(grouped_workdir)
