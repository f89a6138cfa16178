"""The overlay PNG name of each input file, decided once per --out folder
and recorded in <out>/overlays.json, so that a later run never gives a name
an earlier one used to another file (docs/export-and-predict.md)."""

import json
import os
import pathlib

from detector.utils import files

OVERLAYS_FILE = "overlays.json"
# The most bytes overlays.json may hold (a million files' names).
MAX_BYTES = 256 * 2**20


def _recorded(path: pathlib.Path) -> dict[str, str]:
    """resolved input path -> overlay name, as recorded (empty: none yet).

    Raises:
      ValueError: the file is not such a record (named, with the way out).
    """
    try:
        record = json.loads(files.read_regular(path, MAX_BYTES))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, RecursionError) as e:
        record, why = None, str(e)
    else:
        why = "not a JSON object of file: overlay name"
    if isinstance(record, dict) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in record.items()
    ):
        return record
    raise ValueError(
        f"{path}: {why}; remove it (the overlays' names are then chosen anew)"
    )


def assign(
    out: pathlib.Path, paths: list[pathlib.Path]
) -> dict[pathlib.Path, str]:
    """Each of `paths` -> its overlay's name in `out`: the recorded one, or
    `<stem>.png` (`<stem>_<k>.png` once taken, by a recorded overlay or
    by any file already in `out`: predict.py replaces only its own)
    recorded now, before any overlay is written."""
    record_path = out / OVERLAYS_FILE
    recorded = _recorded(record_path)
    used = set(recorded.values()) | set(os.listdir(out))
    added = False
    for path in paths:
        key = os.path.realpath(path)
        if key in recorded:
            continue
        name, k = f"{path.stem}.png", 1
        while name in used:
            name, k = f"{path.stem}_{k}.png", k + 1
        recorded[key], added = name, True
        used.add(name)
    if added:
        files.write_text(record_path, json.dumps(recorded, indent=0))
    return {path: recorded[os.path.realpath(path)] for path in paths}
