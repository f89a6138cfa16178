"""Orbax checkpoints of nested-dict trees, each array's content checksum saved
and checked on restore; a damaged one is skipped (docs/training.md)."""

import contextlib
import gc
import logging as py_logging
import os
import pathlib
import re
import shutil
import sys
from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from absl import logging
from jax import lax
from jax.experimental import multihost_utils

from detector.state import legacy_paths
from detector.utils import files

# The key of the per-array checksums in a step's orbax custom metadata; it
# names the checksum's version, so that a checkpoint written with another
# checksum reads as one without checksums, not as a damaged one.
CHECKSUMS_KEY = "content_checksums_v1"
DAMAGED_SUFFIX = ".damaged"


class DamagedCheckpointError(Exception):
    """A checkpoint that cannot be restored as it was saved."""


class ConfigMismatchError(ValueError):
    """A checkpoint whose arrays another config's model made (a missing,
    extra or differently shaped array)."""


class VanishedCheckpointError(DamagedCheckpointError):
    """A step folder removed after it was listed (a trainer keeping only its
    newest checkpoints deleted it while a reader was restoring it)."""


class CheckpointSaveError(ValueError):
    """A background save failed (a full disk, a lost mount): one line."""


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


def _in_host_memory(x: jax.Array) -> bool:
    """Whether this process holds all of `x` in host memory: on CPU
    devices and replicated (each device's copy is the whole array)."""
    sharding = x.sharding
    return sharding.is_fully_replicated and all(
        device.platform == "cpu" for device in sharding.device_set
    )


def _host_fingerprint(x: jax.Array) -> tuple[tuple[int, int], bool]:
    """`_fingerprints` of one array in host memory, computed by NumPy on it
    in place: the same sums (uint32 arithmetic wraps alike), no program to
    compile."""
    if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
        x = jax.random.key_data(x)
    values = np.ravel(np.asarray(x.addressable_data(0)))
    if values.dtype == np.bool_:
        words = values.astype(np.uint32)
    elif values.dtype.itemsize == 8:  # two words per element, low first
        words = values.view(np.uint32)
    else:
        bits = values.dtype.itemsize * 8
        words = values.view(np.dtype(f"uint{bits}")).astype(np.uint32)
    weighted = 2 * np.arange(words.size, dtype=np.uint32) + 1
    weighted *= words
    first = int(np.sum(weighted, dtype=np.uint32))
    weighted *= words  # w * w * (2i + 1)
    sums = (first, int(np.sum(weighted, dtype=np.uint32)))
    finite = not jnp.issubdtype(x.dtype, jnp.inexact) or bool(
        np.isfinite(values).all()
    )
    return sums, finite


def _fingerprint_tree(tree) -> tuple[dict[str, str], dict[str, bool]]:
    """{name: 16-hex-digit checksum}, {name: finite} of every array."""
    flat = jax.tree_util.tree_flatten_with_path(tree)[0]
    names = [_path_name(path) for path, _ in flat]
    leaves = [jnp.asarray(leaf) for _, leaf in flat]
    with jax.transfer_guard("allow"):  # the fingerprints come to the host
        if all(map(_in_host_memory, leaves)):
            sums, finite = zip(*map(_host_fingerprint, leaves), strict=True)
        else:
            sums, finite = jax.device_get(_fingerprints(leaves))
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


def _save_reason(error: BaseException) -> str:
    """The OS error of a failed write ('No space left on device'), else the
    first line of the error.

    tensorstore's errors end in `[os_error_code=N]`; the text before it is
    not always the OS message (it may quote what was being written), so the
    message is the one the OS gives for N.
    """
    found = re.search(r"\[os_error_code='?(\d+)'?\]", str(error))
    if found:
        return os.strerror(int(found.group(1)))
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return _damage_reason(error)


class _SaveNoise:
    """Keeps a failed background save's tracebacks out of the output.

    While a writing Checkpointer is open, orbax's ERROR records (logged with
    a traceback from its save threads) are dropped, and so are the
    'Event loop is closed' tracebacks that tensorstore's callbacks print
    through sys.excepthook once orbax's event loop is gone. The failure
    itself is reported by CheckpointSaveError, in one line.
    """

    def __init__(self):
        self._owners: set[int] = set()
        self._hooks = (sys.excepthook, sys.unraisablehook)

    def filter(self, record: py_logging.LogRecord) -> bool:
        return not (
            record.levelno >= py_logging.ERROR
            and f"{_SEP}orbax{_SEP}" in record.pathname
        )

    @staticmethod
    def silence_lost_futures() -> None:
        """From now on, drops asyncio's 'exception was never retrieved'
        records: the futures of a failed save report so when they are
        collected, which can be as late as the interpreter's exit."""
        py_logging.getLogger("asyncio").addFilter(_drop_lost_futures)

    @staticmethod
    def _is_noise(value: BaseException | None) -> bool:
        return isinstance(value, RuntimeError) and "Event loop is closed" in (
            str(value)
        )

    def _excepthook(self, kind, value, traceback) -> None:
        if not self._is_noise(value):
            self._hooks[0](kind, value, traceback)

    def _unraisablehook(self, unraisable) -> None:
        if not self._is_noise(unraisable.exc_value):
            self._hooks[1](unraisable)

    def add_for(self, owner: object) -> None:
        if not self._owners:
            py_logging.getLogger("absl").addFilter(self)
            self._hooks = (sys.excepthook, sys.unraisablehook)
            sys.excepthook = self._excepthook
            sys.unraisablehook = self._unraisablehook
        self._owners.add(id(owner))

    def remove_from(self, owner: object) -> None:
        if id(owner) not in self._owners:
            return
        self._owners.discard(id(owner))
        if not self._owners:
            py_logging.getLogger("absl").removeFilter(self)
            if sys.excepthook == self._excepthook:
                sys.excepthook = self._hooks[0]
            if sys.unraisablehook == self._unraisablehook:
                sys.unraisablehook = self._hooks[1]


def _drop_lost_futures(record: py_logging.LogRecord) -> bool:
    return "exception was never retrieved" not in record.getMessage()


_SEP = os.sep
_SAVE_NOISE = _SaveNoise()


def _missing_part(step_dir: pathlib.Path) -> str | None:
    """Why the files of a step folder cannot be a checkpoint, or None."""
    if not step_dir.is_dir():
        raise VanishedCheckpointError("the step folder was removed")
    if not any(step_dir.iterdir()):
        return "the step folder is empty"
    for part in ("default", "default/_METADATA"):
        if not (step_dir / part).exists():
            return f"{part} is missing"
    return None


def saved_checksums(manager: ocp.CheckpointManager, step: int) -> dict | None:
    """{array name: checksum} recorded when `step` was saved; None when
    the step has no (readable) checksums."""
    try:
        with _quiet_orbax():
            custom = manager.metadata(step).custom_metadata or {}
    except Exception:  # noqa: BLE001 (no step metadata: no checksums)
        return None
    return custom.get(CHECKSUMS_KEY)


def verify_arrays(tree: dict, saved: dict | None, where: str) -> None:
    """Checks restored arrays against the checksums saved with them.

    `tree` may be a part of what was saved (names are paths from the
    saved tree's root, e.g. 'params/...'); `saved` None (an older
    checkpoint) checks for finite values only, with a warning.

    Raises:
      DamagedCheckpointError: an array differs from its checksum, or holds
        NaN or Inf.
    """
    checksums, finite = _fingerprint_tree(tree)
    if saved is None:
        logging.warning(
            "%s has no content checksums (written by an "
            "older version): checked for finite values only",
            where,
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
        self._last_saved: int | None = None  # the newest step saved
        self._failed_step: int | None = None  # whose save failed
        self._in_flight = False  # a save not yet waited for
        if create:
            _SAVE_NOISE.add_for(self)
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

    def steps(self) -> list[int]:
        """The steps kept (damaged ones moved aside excluded), oldest
        first."""
        return sorted(self._manager.all_steps())

    def save(self, step: int, tree: dict) -> None:
        """Writes `tree` (nested dicts of arrays) for `step` (async).

        The arrays' content checksums (`content_checksums`, computed
        before the save starts) go into the step's metadata. A failure of
        the background write surfaces as CheckpointSaveError from the next
        `check_saves`, `save`, `wait` or `close`.
        """
        if self._in_flight:
            self.wait()  # orbax would wait too; this reports a failure
        self._last_saved, self._in_flight = step, True
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
        """Raises ValueError naming the first array that does not fit (of
        the top-level parts `abstract_tree` holds)."""
        try:
            with _quiet_orbax():
                stored = _flat_shapes(self._manager.item_metadata(step).tree)
        except Exception as e:  # noqa: BLE001 (any failure: unreadable)
            raise DamagedCheckpointError(
                f"its array metadata is unreadable ({_damage_reason(e)})"
            ) from None
        stored = {
            name: shape
            for name, shape in stored.items()
            if name.split("/")[0] in abstract_tree
        }
        wanted = _flat_shapes(abstract_tree)
        where = self._where(step)
        # Report model arrays before optimizer slots of the same shape.
        for name in sorted(
            set(stored) | set(wanted),
            key=lambda n: (n.startswith("opt_state"), n),
        ):
            if name not in wanted:
                raise ConfigMismatchError(
                    f"{where} has {name!r}, which this config's "
                    "model does not: written by a different "
                    "config"
                )
            if name not in stored:
                raise ConfigMismatchError(
                    f"{where} lacks {name!r}, which this "
                    "config's model has: written by a different "
                    "config"
                )
            if stored[name] != wanted[name]:
                raise ConfigMismatchError(
                    f"{where} holds {name!r} with shape "
                    f"{stored[name]}, but this config needs "
                    f"{wanted[name]}: written by a different "
                    "config"
                )

    def _saved_checksums(self, step: int) -> dict[str, str] | None:
        return saved_checksums(self._manager, step)

    def verify(self, tree: dict, step: int) -> None:
        """Raises DamagedCheckpointError unless `tree` is what was saved."""
        verify_arrays(tree, self._saved_checksums(step), self._where(step))

    def restore(self, abstract_tree: dict, step: int | None = None) -> dict:
        """Restores `step` (default: the latest) into `abstract_tree`'s shapes.

        `abstract_tree` may hold some of the saved tree's top-level parts
        (the weights without "opt_state"): only those are read.

        Raises:
          ValueError: the checkpoint was written for a different config (a
            missing, extra or differently shaped array), naming the first
            offending array.
          DamagedCheckpointError: its files are missing, cut or changed
            since the save (checksums), or it holds non-finite values.
        """
        step = self.latest_step() if step is None else step
        try:
            return self._restore(abstract_tree, step)
        except (DamagedCheckpointError, OSError):
            if not (self.directory / str(step)).is_dir():
                raise VanishedCheckpointError(
                    "the step folder was removed while it was read"
                ) from None
            raise

    def _restore(self, abstract_tree: dict, step: int) -> dict:
        missing = _missing_part(self.directory / str(step))
        if missing:
            raise DamagedCheckpointError(missing)
        layout = self._layout(step)
        if layout:  # restored in its own layout, then converted
            abstract_tree = legacy_paths.to_legacy(abstract_tree, layout)
        self._check_shapes(abstract_tree, step)
        try:
            with _quiet_orbax(collect=True), jax.transfer_guard("allow"):
                tree = self._read(abstract_tree, step)
        except Exception as e:  # noqa: BLE001 (any failure: unreadable)
            raise DamagedCheckpointError(
                f"its data is unreadable ({_damage_reason(e)})"
            ) from None
        self.verify(tree, step)
        if layout:
            logging.info(
                "%s holds the heads at their old paths, %s; restored under "
                "today's (%s)",
                self._where(step),
                layout,
                legacy_paths.CURRENT,
            )
            tree = legacy_paths.to_current(tree, layout)
        return tree

    def _read(self, abstract_tree: dict, step: int) -> dict:
        """The arrays of `abstract_tree` read from `step`: the whole
        tree, or those of its parts alone (a partial PyTree restore of the
        step's one item)."""
        stored = self._manager.item_metadata(step).tree
        if set(abstract_tree) == set(stored):
            return self._manager.restore(
                step, args=ocp.args.StandardRestore(abstract_tree)
            )
        item = (
            self.directory
            / str(step)
            / ocp.checkpoint_manager.DEFAULT_ITEM_NAME
        )
        with ocp.PyTreeCheckpointer() as reader:
            return reader.restore(
                item,
                args=ocp.args.PyTreeRestore(
                    item=abstract_tree,
                    restore_args=ocp.checkpoint_utils.construct_restore_args(
                        abstract_tree
                    ),
                    partial_restore=True,
                ),
            )

    def _layout(self, step: int) -> str | None:
        """The older head layout `step` was written in, or None."""
        try:
            with _quiet_orbax():
                tree = self._manager.item_metadata(step).tree
        except Exception:  # noqa: BLE001 (_check_shapes reports it)
            return None
        return legacy_paths.layout_of(_flat_shapes(tree))

    def restore_latest(self, abstract_tree: dict) -> tuple[int, dict] | None:
        """(step, tree) of the newest intact checkpoint; None if none exists.

        Each damaged checkpoint is logged in one line; a writer moves it
        aside to `<step>.damaged`.

        Raises:
          ValueError: a different config's checkpoint (see `restore`), or
            checkpoints exist and every one is damaged.
        """
        damaged, tried = [], set()
        for step in self._steps_newest_first(tried):
            tried.add(step)
            try:
                return step, self.restore(abstract_tree, step)
            except VanishedCheckpointError:
                logging.info(
                    "%s was removed while it was read (a running trainer "
                    "keeps only its newest checkpoints); trying the next "
                    "newest",
                    self._where(step),
                )
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

    def _steps_newest_first(self, tried: set[int]) -> Iterator[int]:
        """The steps not in `tried`, newest first; when they run out, the
        list is read again (a trainer may have written newer ones), until
        it holds no untried step."""
        while True:
            steps = sorted(set(self._manager.all_steps()) - tried, reverse=True)
            if not steps:
                return
            yield from steps
            with _quiet_orbax():
                self._manager.reload()

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

    def check_saves(self) -> None:
        """Raises CheckpointSaveError if a background save has failed since
        the last check (cheap: it does not wait for a save in flight)."""
        if self._in_flight and not self._manager.is_saving_in_progress():
            self.wait()  # done: returns at once, or raises the save's error

    def wait(self) -> None:
        """Blocks until every in-flight (async) save is on disk.

        Raises:
          CheckpointSaveError: a save failed.
        """
        try:
            with _quiet_orbax():
                self._manager.wait_until_finished()
                self._manager.check_for_errors()
        except Exception as e:  # noqa: BLE001 (any failure: not saved)
            self._save_failed(e)
        self._in_flight = False

    def close(self) -> None:
        """Waits for in-flight saves, then releases the manager.

        Raises:
          CheckpointSaveError: a save failed that was not reported yet.
        """
        try:
            if self._failed_step is None:
                self.wait()
        finally:
            try:
                with _quiet_orbax(collect=True):
                    self._manager.close()
            except Exception:  # noqa: BLE001 (the failure was reported)
                if self._failed_step is None:
                    raise
            finally:
                _SAVE_NOISE.remove_from(self)

    def _save_failed(self, error: BaseException) -> None:
        """Removes what the failed save wrote, then raises one line: the
        step, the folder, the cause, the free space, the newest intact
        checkpoint."""
        step = self._failed_step = self._last_saved
        _SAVE_NOISE.silence_lost_futures()
        if jax.process_index() == 0:
            for partial in self.directory.glob(f"{step}.orbax-checkpoint-tmp*"):
                shutil.rmtree(partial, ignore_errors=True)
        free = files.free_space(self.directory)
        saved = [
            int(p.name)
            for p in (
                self.directory.iterdir() if self.directory.is_dir() else ()
            )
            if p.name.isdigit() and int(p.name) != step
        ]
        raise CheckpointSaveError(
            f"the checkpoint of step {step} could not be written to "
            f"{self.directory}: {_save_reason(error)}; {free} free there; "
            + (
                f"the checkpoint of step {max(saved)} is intact"
                if saved
                else "no earlier checkpoint"
            )
        ) from None
