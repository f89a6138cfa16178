"""The full configuration schema, with defaults, shared by every config
file: every field a module reads is declared here, so a mistyped override
is an error; one module per section (docs/training.md)."""

import json
import pathlib

import ml_collections
from absl import logging

from detector.config import checks, ranges, structure
from detector.config import data as data_section
from detector.config import eval as eval_section
from detector.config import model as model_section
from detector.config import train as train_section
from detector.config.checks import check_image_size
from detector.utils import files

resolve_dtype = model_section.resolve_dtype

# Section name -> its module (defaults() and validate(config)).
SECTIONS = {
    "data": data_section,
    "model": model_section,
    "train": train_section,
    "eval": eval_section,
}

# The top level's own numeric fields (the sections keep their own tables).
RANGES: ranges.Table = {"seed": ranges.between(0, 2**32 - 1, "random seed")}

__all__ = [
    "SECTIONS",
    "apply_variants",
    "base_config",
    "check_image_size",
    "check_schema",
    "load_json",
    "resolve_dtype",
]


def base_config() -> ml_collections.ConfigDict:
    """Returns the schema with COCO-style defaults (TF Model Garden R50-FPN)."""
    config = _top_level()
    for name, section in SECTIONS.items():
        config[name] = section.defaults()
    return config


def _top_level() -> ml_collections.ConfigDict:
    config = ml_collections.ConfigDict()
    config.seed = 0
    return config


# Variants that shrink a run to a smoke run: applied after the others, so
# that 'runlocal,shapes' is the smoke run 'shapes,runlocal' is, not a full-size
# run that a later variant grew back.
SMOKE_VARIANTS = ("runlocal",)


def apply_variants(
    config: ml_collections.ConfigDict,
    arg: str | None,
    variants: dict,
    source: str,
) -> ml_collections.ConfigDict:
    """Applies the comma-separated variant names of `arg` left to right,
    those of SMOKE_VARIANTS last wherever they are named.

    Args:
      config: the config the variants change in place.
      arg: a config file's argument, e.g. 'runlocal,shapes' (None: none).
      variants: name -> function(config) of the config file.
      source: the config file, named in the error of an unknown variant.
    """
    names = list(filter(None, (arg or "").split(",")))
    for name in names:
        if name not in variants:
            raise ValueError(
                f"{source}: unknown variant {name!r}; "
                f"known: {', '.join(variants)}"
            )
    for name in sorted(names, key=lambda n: n in SMOKE_VARIANTS):
        variants[name](config)
    return config


def check_schema(config: ml_collections.ConfigDict) -> None:
    """Checks every section's ranges and field combinations.

    Raises:
      ValueError: one line naming the first bad key, its value and the
        reason.
    """
    ranges.check(config, "", RANGES, _top_level())
    for section in SECTIONS.values():
        section.validate(config)
    # After every section's ranges: the bound spans data, train and eval.
    data_section.check_memory(config)


# The most bytes a config.json may hold (they are a few KiB): a FIFO or a
# device is never waited on or read whole.
MAX_JSON_BYTES = 16 * 2**20


def load_json(
    path: str | pathlib.Path, *, written_by_train: bool = False
) -> ml_collections.ConfigDict:
    """Reads a JSON config (a workdir's config.json, --print_config's
    output) back into the schema's types, checked whole.

    A config.json that train.py wrote (`written_by_train`) may lack the
    fields added since: they keep their defaults, named in one log line.

    Raises:
      FileNotFoundError: no file at `path`.
      ValueError: one line naming `path`: not a regular file, not readable
        JSON, or a section or field missing, unknown or of the wrong type
        (`structure.check`).
    """
    path = pathlib.Path(path)
    if not path.exists():
        raise FileNotFoundError(
            f"{path}: no config.json here; pass "
            "--config=... or a workdir written by "
            "train.py"
        )
    data = files.read_regular(path, MAX_JSON_BYTES)
    try:
        values = json.loads(data)
    except (ValueError, RecursionError) as e:
        where = (
            f" (line {e.lineno} column {e.colno}: {e.msg})"
            if isinstance(e, json.JSONDecodeError)
            else ""
        )
        raise ValueError(
            f"{path}: not readable JSON{where}; damaged? write it again "
            "(train.py writes config.json, --print_config a whole config)"
        ) from None
    if not isinstance(values, dict):
        raise ValueError(
            f"{path}: holds a JSON {type(values).__name__}, not a config "
            "(an object of sections)"
        )
    schema = base_config()
    added = [
        key
        for key in structure.missing(values, schema)
        if not isinstance(checks.get(schema, key), ml_collections.ConfigDict)
    ]
    config = structure.from_json(
        values, schema, str(path), fields_may_be_missing=written_by_train
    )
    if added:
        logging.warning(
            "%s: written before field(s) %s; their defaults are used",
            path,
            ", ".join(added),
        )
    return config
