"""A config's shape against the schema: every section and field present and
each value of its field's type, checked whole where a config enters (a
config file's get_config(), a JSON file); the values' ranges are the
sections' own checks."""

import json
from collections.abc import Mapping

import ml_collections

from detector.config import checks
from detector.utils.ranges import is_number

# How a JSON value is named in an error line.
_JSON_KINDS = (
    (bool, "true or false"),
    (int, "an integer"),
    (float, "a decimal number"),
    (str, "a string"),
    (list, "a list"),
    (dict, "a section"),
    (type(None), "null"),
)


# A section: a ConfigDict, or a JSON object read as a dict.
Section = Mapping | ml_collections.ConfigDict


def _is_section(value: object) -> bool:
    return isinstance(value, Section)


def _kind_of(value: object) -> str:
    return next(
        (name for t, name in _JSON_KINDS if isinstance(value, t)),
        f"a {type(value).__name__}",
    )


def _kind_of_item(value: object, default: object) -> str:
    """What `value` is, or for a list of a list field, what its first item
    of the wrong type is."""
    if isinstance(default, tuple | list) and isinstance(value, list):
        item = default[0] if default else 0.0
        bad = next(v for v in value if not _fits(v, item))
        return f"a list holding {_kind_of(bad)} ({_written(bad)})"
    return _kind_of(value)


def _expected(default: object) -> str:
    """What a field of `default`'s type takes, in words."""
    if isinstance(default, bool):
        return "true or false"
    if isinstance(default, int):
        return "an integer"
    if isinstance(default, float):
        return "a number"
    if isinstance(default, str):
        return "a string"
    if isinstance(default, tuple | list):
        integers = bool(default) and all(isinstance(v, int) for v in default)
        return f"a list of {'integers' if integers else 'numbers'}"
    return f"a {type(default).__name__}"


def _fits(value: object, default: object) -> bool:
    """Whether `value` (JSON or Python) is of the type of field `default`."""
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(value, bool) and isinstance(default, bool)
    if isinstance(default, int):
        return isinstance(value, int)
    if isinstance(default, float):
        return is_number(value)
    if isinstance(default, str):
        return isinstance(value, str)
    if isinstance(default, tuple | list):
        if not isinstance(value, tuple | list):
            return False
        item = default[0] if default else 0.0
        return all(_fits(v, item) for v in value)
    return isinstance(value, type(default))


def _written(value: object) -> str:
    """`value` as the file has it (JSON), short."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def missing(
    config: Section,
    schema: ml_collections.ConfigDict,
    prefix: str = "",
) -> list[str]:
    """Dotted keys of `schema` (sections and fields) that `config` lacks; a
    missing section is named once, not field by field."""
    found = []
    for key, default in schema.items():
        if key not in config:
            found.append(f"{prefix}{key}")
        elif isinstance(default, ml_collections.ConfigDict) and _is_section(
            config[key]
        ):
            found += missing(config[key], default, f"{prefix}{key}.")
    return found


def _missing_line(keys: list[str], schema: ml_collections.ConfigDict) -> str:
    """'section(s) a, b and field(s) c.d' of the dotted `keys`."""
    sections = [k for k in keys if isinstance(checks.get(schema, k), Section)]
    fields = [k for k in keys if k not in sections]
    parts = []
    if sections:
        parts.append(f"section(s) {', '.join(sections)}")
    if fields:
        shown = ", ".join(fields[:8])
        more = f" and {len(fields) - 8} more" if len(fields) > 8 else ""
        parts.append(f"field(s) {shown}{more}")
    return " and ".join(parts)


def type_error(
    config: Section, schema: ml_collections.ConfigDict, prefix: str = ""
) -> str | None:
    """'<key>=<value as written>: must be <type>, not <its type>' for the
    first value of `config` not of its schema field's type, or None."""
    for key, default in schema.items():
        if key not in config:
            continue
        value, name = config[key], f"{prefix}{key}"
        if isinstance(default, ml_collections.ConfigDict):
            if not _is_section(value):
                return (
                    f"{name}={_written(value)}: must be a section of fields, "
                    f"not {_kind_of(value)}"
                )
            found = type_error(value, default, f"{name}.")
            if found:
                return found
        elif not _fits(value, default):
            return (
                f"{name}={_written(value)}: must be {_expected(default)}, "
                f"not {_kind_of_item(value, default)}"
            )
    return None


def unknown(config: Section, schema: Mapping, prefix: str = "") -> str | None:
    """The first dotted key of `config` that `schema` does not have."""
    for key, value in config.items():
        if key not in schema:
            return f"{prefix}{key}"
        if _is_section(value) and _is_section(schema[key]):
            found = unknown(value, schema[key], f"{prefix}{key}.")
            if found:
                return found
    return None


def check(
    config: Section,
    schema: ml_collections.ConfigDict,
    source: str,
    *,
    fields_may_be_missing: bool = False,
) -> None:
    """Checks that `config` has every section and field of `schema`, no
    other, each of its field's type.

    Args:
      config: a ConfigDict, or the dict a JSON file holds.
      schema: the schema with its defaults (`base_config()`).
      source: what the config came from, first in the error line ('my.json',
        '--config: my.py: get_config() returned a config').
      fields_may_be_missing: a field (not a section) missing is no error: a
        workdir's config.json written before the field existed.

    Raises:
      ValueError: one line naming `source`, the key and the value as
        written.
    """
    extra = unknown(config, schema)
    if extra:
        raise ValueError(
            f"{source}: {extra}: not a config field (written by another "
            "version?)"
        )
    gone = missing(config, schema)
    if fields_may_be_missing:
        gone = [k for k in gone if _is_section(checks.get(schema, k))]
    if gone:
        raise ValueError(
            f"{source}: missing {_missing_line(gone, schema)}; every field of "
            "detector.config.base_config() must be there (start from "
            "base_config(); --print_config writes a complete JSON config)"
        )
    wrong = type_error(config, schema)
    if wrong:
        raise ValueError(f"{source}: {wrong}")


def from_json(
    values: Mapping,
    schema: ml_collections.ConfigDict,
    source: str,
    *,
    fields_may_be_missing: bool = False,
) -> ml_collections.ConfigDict:
    """`schema` with the values of a JSON config (`check`ed first) in the
    schema's types: lists as tuples, integers of number fields as floats; a
    field missing keeps its default where `fields_may_be_missing`."""
    check(values, schema, source, fields_may_be_missing=fields_may_be_missing)
    _merge(schema, values)
    return schema


def _merge(target: ml_collections.ConfigDict, values: Mapping) -> None:
    for key, value in values.items():
        default = target[key]
        if isinstance(default, ml_collections.ConfigDict):
            _merge(default, value)
        elif isinstance(default, tuple | list):
            item = default[0] if default else 0.0
            target[key] = tuple(
                float(v) if isinstance(item, float) else v for v in value
            )
        elif isinstance(default, float):
            target[key] = float(value)
        else:
            target[key] = value
