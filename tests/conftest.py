"""Session-wide test setup: a compilation cache shared by the tests.

Several tests compile the same programs (a train step resumed from a
checkpoint, the same model under another test); JAX's persistent cache in a
per-worker temporary folder makes the second compile a lookup.
"""

import jax
import pytest


@pytest.fixture(scope="session", autouse=True)
def compilation_cache(tmp_path_factory):
    jax.config.update("jax_compilation_cache_dir",
                      str(tmp_path_factory.mktemp("jax_cache")))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    yield
    jax.config.update("jax_compilation_cache_dir", None)
