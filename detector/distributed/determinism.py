"""Deterministic GPU runs: `apply(config.train.deterministic)`, first in
main(), puts XLA's deterministic-ops flag in XLA_FLAGS before JAX starts a
backend (docs/training.md)."""

import os

FLAG = "--xla_gpu_deterministic_ops=true"
_ENV = "XLA_FLAGS"


def _is_set(flags: list[str]) -> bool:
    """Whether the last setting of the flag in `flags` is FLAG."""
    name = FLAG.split("=")[0]
    settings = [f for f in flags if f.split("=")[0] == name]
    return bool(settings) and settings[-1] == FLAG


def with_flag(xla_flags: str | None) -> str:
    """`xla_flags` with FLAG appended, unless it is already in effect."""
    flags = (xla_flags or "").split()
    return " ".join(flags if _is_set(flags) else flags + [FLAG])


def enabled() -> bool:
    """Whether this process's XLA_FLAGS ask for deterministic GPU ops."""
    return _is_set(os.environ.get(_ENV, "").split())


def _backends_started() -> bool:
    try:
        from jax._src import xla_bridge
    except ImportError:
        return False
    started = getattr(xla_bridge, "backends_are_initialized", None)
    return bool(started and started())


def apply(deterministic: bool) -> None:
    """Sets XLA_FLAGS for `deterministic` (config.train.deterministic).

    Raises RuntimeError when deterministic ops are asked for after JAX has
    started a backend, where the flag would silently have no effect.
    """
    if not deterministic or enabled():
        return
    if _backends_started():
        raise RuntimeError(
            "config.train.deterministic=True must be applied before JAX "
            "starts a backend (XLA reads XLA_FLAGS once)"
        )
    os.environ[_ENV] = with_flag(os.environ.get(_ENV))
