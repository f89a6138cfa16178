"""CPU programs of the test session compile without LLVM's backend
optimisation.

The suite's programs are tiny and run a few steps, so on a CPU most of
their cost is the compile, about a third of which is LLVM's optimisation
(the tiny train step: 29 -> 20 s of CPU time). Every program of a session
compiles alike, so programs the tests compare bit for bit stay comparable;
the processes the tests start compile with FLAG on any install
(tests/helpers/processes.py). Where JAX can see an accelerator (a CUDA
plugin or libtpu is installed) the flags are left alone: the kernels that
run there are what the tests check.
"""

import importlib.util

FLAG = "--xla_backend_optimization_level=0"
_ACCELERATOR_PLUGINS = ("jax_cuda13_plugin", "jax_cuda12_plugin", "libtpu")


def cpu_only() -> bool:
    """Whether no accelerator plugin is installed beside jaxlib."""
    return not any(
        importlib.util.find_spec(name) for name in _ACCELERATOR_PLUGINS
    )


def with_flag(xla_flags: str) -> str:
    """`xla_flags` with FLAG appended on a CPU-only install."""
    if not cpu_only() or FLAG in xla_flags.split():
        return xla_flags
    return f"{xla_flags} {FLAG}".strip()
