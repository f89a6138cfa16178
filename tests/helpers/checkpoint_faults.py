"""Damages a saved checkpoint in each way a disk, a copy or a user can.

    checkpoint_faults.FAULTS["random_bytes"](workdir / "checkpoints", 8)

Every fault takes the checkpoints folder and a step and changes files in
place. `random_bytes` overwrites 4 KB inside a data file, keeping its size
(orbax then reads changed values or fails to decode, depending on where the
bytes land); `changed_value` rewrites the arrays well-formed with one value
changed (what only a content checksum catches); `no_metadata` removes the
tree metadata orbax reads first; `truncated_data` overwrites the largest data
file with 100 bytes; `empty_step` is a step folder with nothing in it (a copy
cut short).
"""

import pathlib
import shutil
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp


def largest_data_file(checkpoints: pathlib.Path, step: int) -> pathlib.Path:
    """The biggest array data file of checkpoint `step`."""
    files = [
        p
        for p in (checkpoints / str(step) / "default").rglob("*")
        if p.is_file() and p.parent.name == "d"
    ]
    if not files:
        raise FileNotFoundError(f"{checkpoints}/{step}: no data files")
    return max(files, key=lambda p: p.stat().st_size)


def write_random_bytes(
    checkpoints: pathlib.Path,
    step: int,
    *,
    offset: int = 1_000_000,
    size: int = 4096,
) -> None:
    """Overwrites `size` bytes at `offset` of the largest data file.

    In a file shorter than offset + size, the bytes at a tenth of its length
    are overwritten instead (at most a tenth of it); there the small test
    checkpoints hold array values, which orbax then restores changed. The
    file keeps its length either way.
    """
    path = largest_data_file(checkpoints, step)
    length = path.stat().st_size
    if offset + size > length:
        offset = length // 10
        size = min(size, length // 10)
    noise = np.random.default_rng(step).bytes(size)
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(noise)


def change_one_value(
    checkpoints: pathlib.Path, step: int, *, under: str = ""
) -> None:
    """Rewrites the checkpoint's arrays with one float value changed (in
    the first float array whose path starts with `under`).

    Well-formed files whose content differs from what was saved (bit rot
    that lands inside array values): only a content checksum sees it.
    """
    item = checkpoints / str(step) / "default"
    with ocp.StandardCheckpointer() as checkpointer:
        tree = checkpointer.restore(item)
        paths = [
            "/".join(str(getattr(k, "key", k)) for k in path)
            for path, _ in jax.tree_util.tree_flatten_with_path(tree)[0]
        ]
        leaves, treedef = jax.tree.flatten(tree)
        index = next(
            i
            for i, x in enumerate(leaves)
            if jnp.issubdtype(x.dtype, jnp.floating)
            and x.size
            and paths[i].startswith(under)
        )
        flat = jnp.ravel(leaves[index])
        leaves[index] = flat.at[0].set(flat[0] + 1).reshape(leaves[index].shape)
        rewritten = item.with_name("default.rewritten")
        checkpointer.save(rewritten, jax.tree.unflatten(treedef, leaves))
        checkpointer.wait_until_finished()
    shutil.rmtree(item)
    rewritten.rename(item)


def remove_metadata(checkpoints: pathlib.Path, step: int) -> None:
    """Deletes the checkpoint's `_METADATA` (its tree of arrays)."""
    (checkpoints / str(step) / "default" / "_METADATA").unlink()


def truncate_data_file(checkpoints: pathlib.Path, step: int) -> None:
    """Replaces the largest data file with its first 100 bytes."""
    path = largest_data_file(checkpoints, step)
    path.write_bytes(path.read_bytes()[:100])


def add_empty_step(checkpoints: pathlib.Path, step: int) -> None:
    """Creates an empty folder for `step` (newer than the saved ones)."""
    (checkpoints / str(step)).mkdir()


# name -> fault(checkpoints folder, step)
FAULTS: dict[str, Callable[[pathlib.Path, int], None]] = {
    "random_bytes": write_random_bytes,
    "changed_value": change_one_value,
    "no_metadata": remove_metadata,
    "truncated_data": truncate_data_file,
    "empty_step": add_empty_step,
}
