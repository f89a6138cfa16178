"""matplotlib's pyplot on the file-only Agg backend, imported on first use:
importing it takes about 0.4 s of a 2-core CPU, which an entry point that
draws nothing (a run that stops on a bad flag, a log step) need not pay."""

import functools
from types import ModuleType


@functools.cache
def pyplot() -> ModuleType:
    """`matplotlib.pyplot`, its backend set to Agg (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
