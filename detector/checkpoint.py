"""Orbax checkpoints of nested-dict trees; a config mismatch is one error."""

import pathlib

import jax
import numpy as np
import orbax.checkpoint as ocp


def _flat_shapes(tree) -> dict[str, tuple]:
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {"/".join(str(getattr(k, "key", getattr(k, "idx", k)))
                     for k in path):
            tuple(getattr(leaf, "shape", np.shape(leaf)))
            for path, leaf in leaves}


class Checkpointer:
    """Saves and restores the training state under `<workdir>/checkpoints`.

    `create=False` is for readers (eval.py): a missing directory is not
    created; it simply holds no checkpoint.
    """

    def __init__(self, directory: str | pathlib.Path, *, max_to_keep: int,
                 create: bool = True):
        self.directory = pathlib.Path(directory).absolute()
        self._manager = ocp.CheckpointManager(
            self.directory, options=ocp.CheckpointManagerOptions(
                max_to_keep=max_to_keep, create=create),
            item_handlers=ocp.StandardCheckpointHandler())

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def save(self, step: int, tree: dict) -> None:
        """Writes `tree` (nested dicts of arrays) for `step` (async)."""
        with jax.transfer_guard("allow"):  # saving reads arrays on purpose
            self._manager.save(step, args=ocp.args.StandardSave(tree))

    def restore(self, abstract_tree: dict, step: int | None = None) -> dict:
        """Restores into the shapes of `abstract_tree`.

        Raises:
          ValueError: the checkpoint was written for a different config (a
            missing, extra or differently shaped array), naming the first
            offending array.
        """
        step = self.latest_step() if step is None else step
        stored = _flat_shapes(self._manager.item_metadata(step).tree)
        wanted = _flat_shapes(abstract_tree)
        where = f"checkpoint {self.directory}/{step}"
        # Report model arrays before optimizer slots of the same shape.
        for name in sorted(set(stored) | set(wanted),
                           key=lambda n: (n.startswith("opt_state"), n)):
            if name not in wanted:
                raise ValueError(f"{where} has {name!r}, which this config's "
                                 "model does not: written by a different "
                                 "config")
            if name not in stored:
                raise ValueError(f"{where} lacks {name!r}, which this "
                                 "config's model has: written by a different "
                                 "config")
            if stored[name] != wanted[name]:
                raise ValueError(f"{where} holds {name!r} with shape "
                                 f"{stored[name]}, but this config needs "
                                 f"{wanted[name]}: written by a different "
                                 "config")
        with jax.transfer_guard("allow"):
            return self._manager.restore(
                step, args=ocp.args.StandardRestore(abstract_tree))

    def wait(self) -> None:
        """Blocks until every in-flight (async) save is on disk."""
        self._manager.wait_until_finished()

    def close(self) -> None:
        """Waits for in-flight saves, then releases the manager."""
        try:
            self._manager.wait_until_finished()
        finally:
            self._manager.close()
