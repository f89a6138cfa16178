"""The TFDS source's orientation index on disk: (image/id, height, width)
per record, beside the data or in a cache folder, written whole."""

import hashlib
import io
import json
import os
import pathlib
import re
import zipfile
from collections.abc import Sequence

import numpy as np
import tensorflow as tf
from absl import logging

from detector.utils import files

# Bumped when the index's file changes meaning.
FORMAT = 1
# What reading or writing a local or remote (gs://) file raises.
_FILE_ERRORS = (OSError, zipfile.BadZipFile, tf.errors.OpError)


def made_for(tfds: str, split: str, records: int) -> dict:
    """What an index file records it was made for; a file made for other
    data is stale."""
    return {"format": FORMAT, "tfds": tfds, "split": split, "records": records}


def read(paths: Sequence[str], meta: dict) -> np.ndarray | None:
    """The index [records, 3] int64 from the first of `paths` made for
    `meta`'s data, else None (logged when a file is stale or unreadable)."""
    for path in paths:
        table = _read_one(path, meta)
        if table is not None:
            return table
    return None


def cache_folder() -> pathlib.Path:
    """Where an index goes when the data folder is read-only."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return pathlib.Path(root, "flax-maskrcnn", "tfds")


def paths(data_dir: str, split: str) -> tuple[str, str]:
    """The index file of `split`: beside the data, and in the cache folder
    (a folder per data folder)."""
    slug = re.sub(r"[^\w.-]", "_", split)
    name = f"orientation_index.{slug}.npz"
    key = hashlib.sha256(str(data_dir).encode()).hexdigest()[:16]
    beside = f"{str(data_dir).rstrip('/')}/{name}"
    return beside, str(cache_folder() / key / name)


def _read_one(path: str, meta: dict) -> np.ndarray | None:
    """The index in `path` if it was made for `meta`'s data, else None."""
    try:
        if not tf.io.gfile.exists(path):
            return None
        with tf.io.gfile.GFile(path, "rb") as f:
            data = f.read()
        with np.load(io.BytesIO(data), allow_pickle=False) as stored:
            made_for = json.loads(str(stored["meta"]))
            table = np.asarray(stored["records"], np.int64)
    except (*_FILE_ERRORS, EOFError, ValueError, KeyError) as e:
        logging.warning("%s: unreadable (%s); rebuilding it", path, e)
        return None
    if made_for != meta or table.shape != (meta["records"], 3):
        logging.warning(
            "%s: stale (made for %s, the data is %s); rebuilding it",
            path,
            made_for,
            meta,
        )
        return None
    return table


def _write_whole(path: str, data: bytes) -> None:
    """Writes `data` to `path` whole or not at all: a local file by one
    rename, a remote one (gs://) by one upload (object stores publish an
    object whole)."""
    if "://" in path:
        with tf.io.gfile.GFile(path, "wb") as f:
            f.write(data)
    else:
        files.write_bytes(path, data)


def write(table: np.ndarray, meta: dict, where: Sequence[str]) -> None:
    """Writes the index to the first of `where` (`paths`) this process can
    write."""
    buffer = io.BytesIO()
    np.savez(buffer, records=table, meta=np.array(json.dumps(meta)))
    beside, cached = where
    try:
        _write_whole(beside, buffer.getvalue())
        logging.info("%s: orientation index written", beside)
        return
    except _FILE_ERRORS as e:
        reason = getattr(e, "strerror", None) or str(e)
    try:
        os.makedirs(os.path.dirname(cached), exist_ok=True)
        _write_whole(cached, buffer.getvalue())
        logging.info(
            "%s: cannot write the orientation index beside the data (%s); "
            "wrote it to %s",
            beside,
            reason,
            cached,
        )
    except _FILE_ERRORS as e:
        logging.warning(
            "orientation index not saved (%s: %s; %s: %s); the next start "
            "reads the image headers again",
            beside,
            reason,
            cached,
            getattr(e, "strerror", None) or e,
        )
