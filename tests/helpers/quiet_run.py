"""A quiet test run: third-party noise that is not the project's fault off.

    quiet_run.install()          # tests/conftest.py, before any test import
    quiet_run.drop_gc_callbacks()   # at the end of the session

- TensorFlow prints native lines while it is imported (absl's "before
  InitializeLog" notice, the oneDNN and CPU-feature INFO lines) whatever
  TF_CPP_MIN_LOG_LEVEL says; `install` makes the first `import tensorflow`
  run with file descriptor 2 pointed at /dev/null. Import errors still
  raise; only what the import prints is dropped.
- hypothesis and JAX (`_xla_gc_callback`) keep Python callbacks in
  `gc.callbacks`. When pytest-xdist stops a worker it interrupts the
  worker's main thread; a KeyboardInterrupt that lands while the collector
  runs such a callback is "unraisable", and pytest prints its traceback
  above the summary. `drop_gc_callbacks` removes them once the tests are
  done.
"""

import contextlib
import gc
import importlib.abc
import importlib.util
import os
import sys

_QUIET_IMPORTS = ("tensorflow",)
_GC_CALLBACK_PACKAGES = ("hypothesis", "jax")


@contextlib.contextmanager
def native_stderr_silenced():
    """File descriptor 2 on /dev/null inside the block."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


class _QuietImport(importlib.abc.MetaPathFinder):
    """Runs the first import of each of `names` with stderr silenced."""

    def __init__(self, names: tuple[str, ...]):
        self._names = set(names)

    def find_spec(self, name, path=None, target=None):
        if name not in self._names:
            return None
        self._names.discard(name)
        if not self._names:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def quiet(module):
            with native_stderr_silenced():
                exec_module(module)

        spec.loader.exec_module = quiet
        return spec


def install() -> None:
    """The quiet TensorFlow import (module docstring); once per process."""
    if not any(isinstance(f, _QuietImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _QuietImport(_QUIET_IMPORTS))


def drop_gc_callbacks() -> int:
    """Removes the packages' gc callbacks; returns how many it removed."""
    kept = [
        callback
        for callback in gc.callbacks
        if not getattr(callback, "__module__", "").startswith(
            _GC_CALLBACK_PACKAGES
        )
    ]
    removed = len(gc.callbacks) - len(kept)
    gc.callbacks[:] = kept
    return removed
