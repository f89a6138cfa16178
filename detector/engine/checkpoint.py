"""Orbax checkpoints of nested-dict trees, verified when they are restored.

orbax keeps no checksum of the array data, so a flipped byte on disk would be
restored silently. Each save therefore records a 64-bit content checksum per
array (computed on the device from the arrays' bits, `content_checksums`) in
the step's orbax metadata, and every restore checks the restored arrays
against it and for non-finite values. A checkpoint that fails any check
(missing or cut files, an empty step folder, changed bytes) is reported in
one log line and the newest intact one is used instead (`restore_latest`);
a trainer moves the damaged one aside to `<step>.damaged` so it is neither
resumed nor overwritten.
"""

import contextlib
import gc
import logging as py_logging
import pathlib
from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from absl import logging
from jax import lax
from jax.experimental import multihost_utils

# The key of the per-array checksums in a step's orbax custom metadata; it
# names the checksum's version, so that a checkpoint written with another
# checksum reads as one without checksums, not as a damaged one.
CHECKSUMS_KEY = "content_checksums_v1"
DAMAGED_SUFFIX = ".damaged"


class DamagedCheckpointError(Exception):
    """A checkpoint that cannot be restored as it was saved."""


def _path_name(path) -> str:
    return "/".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path)


def _flat_shapes(tree) -> dict[str, tuple]:
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {
        _path_name(path): tuple(getattr(leaf, "shape", np.shape(leaf)))
        for path, leaf in leaves
    }


def _words(x: jax.Array) -> jax.Array:
    """uint32[n]: the bits of `x`, one word per element (two for 64 bits)."""
    if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
        x = jax.random.key_data(x)
    x = jnp.ravel(x)
    if x.dtype == jnp.bool_:
        return x.astype(jnp.uint32)
    bits = x.dtype.itemsize * 8
    if bits == 64:
        return jnp.ravel(lax.bitcast_convert_type(x, jnp.uint32))
    return lax.bitcast_convert_type(x, jnp.dtype(f"uint{bits}")).astype(
        jnp.uint32
    )


def _checksum(x: jax.Array) -> jax.Array:
    """uint32[2]: two position-weighted sums (mod 2**32) of `x`'s words.

    Word i (w) is weighed by the odd number 2i + 1, so any change of one
    word, or a swap of two, changes the first lane; the second sums
    w * w * (2i + 1), which no change that keeps the first lane's sum keeps
    in general. Integer sums are exact and order-free, so every backend
    computes the same value. (Cheap on purpose: a non-linear mix per word
    costs about twice as much on CPU.)
    """
    words = _words(x)
    weights = 2 * jnp.arange(words.size, dtype=jnp.uint32) + 1
    return jnp.stack(
        [
            jnp.sum(words * weights, dtype=jnp.uint32),
            jnp.sum(words * words * weights, dtype=jnp.uint32),
        ]
    )


def _is_finite(x: jax.Array) -> jax.Array:
    if jnp.issubdtype(x.dtype, jnp.inexact):
        return jnp.isfinite(x).all()
    return jnp.asarray(True)


@jax.jit
def _fingerprints(leaves: list[jax.Array]) -> tuple[jax.Array, jax.Array]:
    """(uint32[L, 2] checksums, bool[L] all-finite) of each leaf."""
    return (
        jnp.stack([_checksum(x) for x in leaves]),
        jnp.stack([_is_finite(x) for x in leaves]),
    )


def _fingerprint_tree(tree) -> tuple[dict[str, str], dict[str, bool]]:
    """{name: 16-hex-digit checksum}, {name: finite} of every array."""
    flat = jax.tree_util.tree_flatten_with_path(tree)[0]
    names = [_path_name(path) for path, _ in flat]
    with jax.transfer_guard("allow"):  # the fingerprints come to the host
        sums, finite = jax.device_get(
            _fingerprints([jnp.asarray(leaf) for _, leaf in flat])
        )
    return (
        {
            n: f"{int(a):08x}{int(b):08x}"
            for n, (a, b) in zip(names, sums, strict=True)
        },
        dict(zip(names, (bool(f) for f in finite), strict=True)),
    )


def content_checksums(tree) -> dict[str, str]:
    """{array name: 64-bit content checksum in hex} of a tree of arrays."""
    return _fingerprint_tree(tree)[0]


@contextlib.contextmanager
def _quiet_orbax(collect: bool = False) -> Iterator[None]:
    """Silences orbax's and asyncio's own logging of a failed read.

    A damaged checkpoint is reported in one line by the caller; orbax would
    otherwise log warnings and asyncio the tracebacks of its failed tasks
    (`collect`: collect garbage before leaving, so that failed tasks, which
    report when collected, do it while silenced).
    """
    loggers = [py_logging.getLogger(name) for name in ("absl", "asyncio")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(py_logging.CRITICAL)
    try:
        yield
    finally:
        if collect:
            gc.collect()
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def _damage_reason(error: BaseException) -> str:
    """The first line of the innermost cause of `error`, at most 160 chars."""
    while error.__cause__ is not None:
        error = error.__cause__
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    text = lines[0] if lines else type(error).__name__
    return text if len(text) <= 160 else text[:157] + "..."


def _missing_part(step_dir: pathlib.Path) -> str | None:
    """Why the files of a step folder cannot be a checkpoint, or None."""
    if not any(step_dir.iterdir()):
        return "the step folder is empty"
    for part in ("default", "default/_METADATA"):
        if not (step_dir / part).exists():
            return f"{part} is missing"
    return None


class Checkpointer:
    """Saves and restores the training state under `<workdir>/checkpoints`.

    `create=False` is for readers (eval.py): a missing directory is not
    created, it simply holds no checkpoint, and a damaged checkpoint is
    skipped but left where it is.
    """

    def __init__(
        self,
        directory: str | pathlib.Path,
        *,
        max_to_keep: int,
        create: bool = True,
    ):
        self.directory = pathlib.Path(directory).absolute()
        self._writer = create
        with _quiet_orbax():  # its warnings about damaged step folders
            self._manager = ocp.CheckpointManager(
                self.directory,
                options=ocp.CheckpointManagerOptions(
                    max_to_keep=max_to_keep, create=create
                ),
                item_handlers=ocp.StandardCheckpointHandler(),
            )

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def save(self, step: int, tree: dict) -> None:
        """Writes `tree` (nested dicts of arrays) for `step` (async).

        The arrays' content checksums (one small device program, fetched
        before the save starts) go into the step's metadata.
        """
        checksums = content_checksums(tree)
        with jax.transfer_guard("allow"):  # saving reads arrays on purpose
            self._manager.save(
                step,
                args=ocp.args.StandardSave(tree),
                custom_metadata={CHECKSUMS_KEY: checksums},
            )

    def _where(self, step: int) -> str:
        return f"checkpoint {self.directory}/{step}"

    def _check_shapes(self, abstract_tree: dict, step: int) -> None:
        """Raises ValueError naming the first array that does not fit."""
        try:
            with _quiet_orbax():
                stored = _flat_shapes(self._manager.item_metadata(step).tree)
        except Exception as e:  # noqa: BLE001 (any failure: unreadable)
            raise DamagedCheckpointError(
                f"its array metadata is unreadable ({_damage_reason(e)})"
            ) from None
        wanted = _flat_shapes(abstract_tree)
        where = self._where(step)
        # Report model arrays before optimizer slots of the same shape.
        for name in sorted(
            set(stored) | set(wanted),
            key=lambda n: (n.startswith("opt_state"), n),
        ):
            if name not in wanted:
                raise ValueError(
                    f"{where} has {name!r}, which this config's "
                    "model does not: written by a different "
                    "config"
                )
            if name not in stored:
                raise ValueError(
                    f"{where} lacks {name!r}, which this "
                    "config's model has: written by a different "
                    "config"
                )
            if stored[name] != wanted[name]:
                raise ValueError(
                    f"{where} holds {name!r} with shape "
                    f"{stored[name]}, but this config needs "
                    f"{wanted[name]}: written by a different "
                    "config"
                )

    def _saved_checksums(self, step: int) -> dict[str, str] | None:
        try:
            with _quiet_orbax():
                custom = self._manager.metadata(step).custom_metadata or {}
        except Exception:  # noqa: BLE001 (no step metadata: no checksums)
            return None
        return custom.get(CHECKSUMS_KEY)

    def verify(self, tree: dict, step: int) -> None:
        """Raises DamagedCheckpointError unless `tree` is what was saved."""
        checksums, finite = _fingerprint_tree(tree)
        saved = self._saved_checksums(step)
        if saved is None:
            logging.warning(
                "%s has no content checksums (written by an "
                "older version): checked for finite values only",
                self._where(step),
            )
        else:
            changed = [n for n in checksums if saved.get(n) != checksums[n]]
            if changed:
                raise DamagedCheckpointError(
                    f"{len(changed)} of {len(checksums)} arrays differ from "
                    f"their checksums at save time, first {changed[0]!r}"
                )
        bad = [name for name, ok in finite.items() if not ok]
        if bad:
            raise DamagedCheckpointError(
                f"{len(bad)} arrays hold NaN or Inf, first {bad[0]!r}"
            )

    def restore(self, abstract_tree: dict, step: int | None = None) -> dict:
        """Restores `step` (default: the latest) into `abstract_tree`'s shapes.

        Raises:
          ValueError: the checkpoint was written for a different config (a
            missing, extra or differently shaped array), naming the first
            offending array.
          DamagedCheckpointError: its files are missing, cut or changed
            since the save (checksums), or it holds non-finite values.
        """
        step = self.latest_step() if step is None else step
        missing = _missing_part(self.directory / str(step))
        if missing:
            raise DamagedCheckpointError(missing)
        self._check_shapes(abstract_tree, step)
        try:
            with _quiet_orbax(collect=True), jax.transfer_guard("allow"):
                tree = self._manager.restore(
                    step, args=ocp.args.StandardRestore(abstract_tree)
                )
        except Exception as e:  # noqa: BLE001 (any failure: unreadable)
            raise DamagedCheckpointError(
                f"its data is unreadable ({_damage_reason(e)})"
            ) from None
        self.verify(tree, step)
        return tree

    def restore_latest(self, abstract_tree: dict) -> tuple[int, dict] | None:
        """(step, tree) of the newest intact checkpoint; None if none exists.

        Each damaged checkpoint is logged in one line; a writer moves it
        aside to `<step>.damaged`.

        Raises:
          ValueError: a different config's checkpoint (see `restore`), or
            checkpoints exist and every one is damaged.
        """
        damaged = []
        for step in sorted(self._manager.all_steps(), reverse=True):
            try:
                return step, self.restore(abstract_tree, step)
            except DamagedCheckpointError as e:
                damaged.append(f"{step} ({e})")
                moved = self._move_aside(step)
                logging.error(
                    "%s is damaged: %s%s; falling back to the "
                    "previous checkpoint",
                    self._where(step),
                    e,
                    f"; moved to {moved.name}" if moved else "",
                )
        if damaged:
            raise ValueError(
                f"{self.directory}: no intact checkpoint; "
                f"damaged: {'; '.join(damaged)}"
            )
        return None

    def _move_aside(self, step: int) -> pathlib.Path | None:
        """Renames a damaged step folder so that no run resumes from it or
        saves over it (writers only; process 0 renames). Returns the new
        path, or None for a reader."""
        if not self._writer:
            return None
        source = self.directory / str(step)
        target, n = source.with_name(f"{step}{DAMAGED_SUFFIX}"), 1
        while target.exists():
            target = source.with_name(f"{step}{DAMAGED_SUFFIX}{n}")
            n += 1
        if jax.process_index() == 0:
            source.rename(target)
        if jax.process_count() > 1:
            multihost_utils.sync_global_devices(f"moved aside {step}")
        with _quiet_orbax():
            self._manager.reload()
        return target

    def wait(self) -> None:
        """Blocks until every in-flight (async) save is on disk."""
        self._manager.wait_until_finished()

    def close(self) -> None:
        """Waits for in-flight saves, then releases the manager."""
        try:
            self._manager.wait_until_finished()
        finally:
            self._manager.close()
