"""Which settings of an evaluation differ from its run's own, and the name
they give its result: the run's own `eval_<split>.json` (train.py's, which
its summary reports) is replaced only by an evaluation of the same
settings (docs/faults.md)."""

import hashlib
import json
import pathlib
import re

import ml_collections

# Config sections whose fields can change a result.
SECTIONS = ("model", "eval", "data")
# Fields already in the result's name (the data's origin, the split).
NAMED_ELSEWHERE = {
    "data.source",
    "data.root",
    "data.tfds_name",
    "data.tfds_data_dir",
    "data.eval_split",
}
# Fields that change what is drawn, not the result: never in the name.
NOT_IN_RESULT = {"eval.num_visualized"}
# The two NMS sites, which --nms sets together: named once.
_NMS_SITES = ("model.rpn.nms_backend", "model.detection.nms_backend")
# The longest settings part of a name; more is named by a digest.
MAX_SUFFIX = 64


def _flat(node: object, prefix: str = "") -> dict[str, object]:
    """{dotted key: JSON value} of a nested dict."""
    if not isinstance(node, dict):
        return {prefix: json.loads(json.dumps(node))}
    found: dict[str, object] = {}
    for key, value in node.items():
        found |= _flat(value, f"{prefix}.{key}" if prefix else key)
    return found


def _run_config(workdir: pathlib.Path) -> dict | None:
    """The run's own config.json as a dict, or None where there is none."""
    try:
        return json.loads((workdir / "config.json").read_text())
    except (OSError, ValueError):
        return None


def changed_settings(
    config: ml_collections.ConfigDict, workdir: pathlib.Path, max_images: int
) -> dict[str, object]:
    """{key: value} of each field of SECTIONS (eval.max_images as
    `max_images` sets it, when not 0) in which `config` differs from the
    run's config.json; fields either lacks are not compared, and none
    differ where there is no config.json."""
    own = _run_config(pathlib.Path(workdir))
    if not isinstance(own, dict):
        return {}
    used = {s: config[s].to_dict() for s in SECTIONS if s in config}
    if max_images:
        used["eval"]["max_images"] = max_images
    mine = _flat(
        {s: own.get(s) for s in SECTIONS if isinstance(own.get(s), dict)}
    )
    return {
        key: value
        for key, value in sorted(_flat(used).items())
        if key in mine
        and mine[key] != value
        and key not in NAMED_ELSEWHERE | NOT_IN_RESULT
    }


def _part(key: str, value: object) -> str:
    shown = value if not isinstance(value, list) else "x".join(map(str, value))
    # No '.': the stem takes .json and .png (pathlib's with_suffix).
    return re.sub(r"[^A-Za-z0-9-]+", "_", f"{key}-{shown}")


def suffix(settings: dict[str, object]) -> str:
    """What `settings` add to a result's name: `_<field>-<value>` for each
    (the field's last name, or its whole key where two share it; `nms-`
    for both NMS sites set alike), sorted; a digest of them where that
    would be longer than MAX_SUFFIX; '' for none."""
    shown = dict(settings)
    if (
        all(k in shown for k in _NMS_SITES)
        and len({json.dumps(shown[k]) for k in _NMS_SITES}) == 1
    ):
        shown["nms"] = shown.pop(_NMS_SITES[0])
        del shown[_NMS_SITES[1]]
    leaves = [key.rsplit(".", 1)[-1] for key in shown]
    parts = sorted(
        _part(leaf if leaves.count(leaf) == 1 else key, value)
        for leaf, (key, value) in zip(leaves, shown.items(), strict=True)
    )
    name = "".join(f"_{part}" for part in parts)
    if len(name) <= MAX_SUFFIX:
        return name
    digest = hashlib.sha256(
        json.dumps(settings, sort_keys=True).encode()
    ).hexdigest()[:8]
    return f"_settings-{digest}"
