"""This process among all, and its share of a global batch (training's
and evaluation's)."""

import jax


def processes(
    process_index: int | None, process_count: int | None
) -> tuple[int, int]:
    """(index, count) of this process, from JAX unless given."""
    index = jax.process_index() if process_index is None else process_index
    count = jax.process_count() if process_count is None else process_count
    if not 0 <= index < count:
        raise ValueError(f"process_index={index} is not in [0, {count})")
    return index, count


def per_process(global_size: int, count: int, key: str) -> int:
    """The per-process share of a global batch size; it must divide evenly."""
    if global_size <= 0 or global_size % count:
        raise ValueError(
            f"{key}={global_size} must be a positive multiple "
            f"of the process count {count}"
        )
    return global_size // count
