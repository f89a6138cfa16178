"""predict.json edits are one line naming the key."""

import copy
import dataclasses

import numpy as np
import pytest

from detector.imaging import masks
from detector.predict import artifact, artifact_meta

META = {
    "format_version": 3,
    "canvases": [[64, 128], [128, 64]],
    "canvas_bytes": [1000, 1001],
    "weights_bytes": 5000,
    "resize": {"rule": "shortest_edge", "min_size": 64, "max_size": 96},
    "batch_sizes": "b",
    "pixel_mean": [123.675, 116.28, 103.53],
    "pixel_std": [58.395, 57.12, 57.375],
    "categories": [{"id": 1, "name": "square"}],
    "num_classes": 1,
    "nms_backend": {
        "cpu": {"rpn": "cpu", "detection": "cpu"},
        "cuda": {"rpn": "pallas", "detection": "pallas"},
    },
    "jax_version": "0.10.2",
    "calling_convention_version": 9,
    "platforms": ["cpu", "cuda"],
    "checkpoint_step": 3,
    "mask_paste": "centres",
    "sha256": "0" * 64,
}
PASTERS = tuple(masks.MASK_PASTERS)
# What export.py wrote before the weights section: each function holds them.
FORMAT_2 = {k: v for k, v in META.items() if k != "weights_bytes"} | {
    "format_version": 2
}
# What export.py wrote before predict.json had a format_version: one canvas.
FORMAT_1 = {
    key: value
    for key, value in META.items()
    if key
    not in ("format_version", "canvases", "canvas_bytes", "weights_bytes")
} | {
    "image_size": [128, 128],
    "resize": {
        "rule": "letterbox",
        "image_size": [128, 128],
        "min_size": 800,
        "max_size": 1333,
    },
    "canvases": [[128, 128]],  # written, not read
}


def test_the_exporters_meta_passes():
    artifact_meta.check(META, "predict.json", PASTERS)


@pytest.mark.parametrize(
    "key, value",
    [
        ("mask_paste", ["x"]),
        ("mask_paste", "nearest"),
        ("categories", None),
        ("categories", [{"id": 1}]),
        ("categories", [{"id": "1", "name": "a"}]),
        ("canvases", "abc"),
        ("canvases", [[64, 128], [128, 64], [96, 96]]),
        ("canvases", []),
        ("canvases", [[64, 0]]),
        ("canvases", [[64.0, 128]]),
        ("canvas_bytes", [1000, 0]),
        ("canvas_bytes", None),
        ("weights_bytes", -1),
        ("weights_bytes", None),
        ("resize", "letterbox"),
        ("pixel_std", [1, 0, 1]),
        ("pixel_mean", [1, 2]),
        ("platforms", []),
        ("nms_backend", None),
        ("nms_backend", {"cpu": "cpu"}),
        ("checkpoint_step", -1),
        ("checkpoint_step", True),
        ("sha256", "abc"),
        ("jax_version", 10),
        ("batch_sizes", 8),
        ("num_classes", 0),
    ],
)
def test_a_bad_value_names_the_key(key, value):
    meta = copy.deepcopy(META)
    meta[key] = value
    with pytest.raises(artifact_meta.MetaError) as error:
        artifact_meta.check(meta, "predict.json", PASTERS)
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(f"predict.json: {key}="), message


def test_every_schema_key_is_tested():
    assert set(artifact_meta.REQUIRED_KEYS) == set(META)
    assert artifact.REQUIRED_KEYS == artifact_meta.REQUIRED_KEYS
    assert META["format_version"] == artifact_meta.FORMAT_VERSION


@pytest.mark.parametrize("value", [4, 0, "3", True])
def test_an_unknown_format_version_is_named(value):
    meta = copy.deepcopy(META) | {"format_version": value}
    with pytest.raises(artifact_meta.MetaError) as error:
        artifact_meta.check(meta, "predict.json", PASTERS)
    assert str(error.value) == (
        f"predict.json: format_version={value!r}: must be one of 1, 2, 3 "
        "(an export of a newer version? export it again with this one)"
    )


def test_format_2_passes_and_reads_with_no_weights_section():
    artifact_meta.check(FORMAT_2, "predict.json", PASTERS)
    current = artifact_meta.current(FORMAT_2)
    assert current["format_version"] == 2
    assert current["weights_bytes"] is None
    assert set(current) == set(META)


def test_format_3_lacking_weights_bytes_is_named():
    meta = FORMAT_2 | {"format_version": 3}
    with pytest.raises(artifact_meta.MetaError) as error:
        artifact_meta.check(meta, "predict.json", PASTERS)
    assert str(error.value).startswith("predict.json: lacks weights_bytes (")


def test_canvas_bytes_name_one_function_per_canvas():
    meta = copy.deepcopy(META) | {"canvas_bytes": [2001]}
    with pytest.raises(artifact_meta.MetaError) as error:
        artifact_meta.check(meta, "predict.json", PASTERS)
    assert str(error.value) == (
        "predict.json: canvas_bytes lists 1 functions but canvases 2; "
        "restore the exported values or export again"
    )


def test_format_1_passes_and_reads_as_its_one_canvas():
    artifact_meta.check(FORMAT_1, "predict.json", PASTERS)
    current = artifact_meta.current(FORMAT_1)
    assert current["format_version"] == 1
    assert current["canvases"] == [[128, 128]]
    assert current["canvas_bytes"] is None
    assert current["weights_bytes"] is None
    assert current["resize"] == {
        "rule": "letterbox",
        "min_size": 800,
        "max_size": 1333,
    }
    assert "image_size" not in current
    assert set(current) == set(META)
    assert artifact_meta.current(META) is META


@pytest.mark.parametrize("value", ["abc", [128, 0], [128.0, 128]])
def test_a_bad_format_1_image_size_names_the_key(value):
    meta = copy.deepcopy(FORMAT_1) | {"image_size": value}
    with pytest.raises(artifact_meta.MetaError) as error:
        artifact_meta.check(meta, "predict.json", PASTERS)
    assert str(error.value).startswith(f"predict.json: image_size={value!r}")


def test_a_missing_key_is_named():
    meta = {k: v for k, v in META.items() if k != "categories"}
    with pytest.raises(
        artifact_meta.MetaError,
        match=r": lacks categories \(an export of another version\? run "
        r"export.py on the workdir again\)$",
    ):
        artifact_meta.check(meta, "predict.json", PASTERS)


@pytest.mark.parametrize("count", [1, 3])
def test_a_category_count_other_than_the_models_names_both(count):
    """An edited list would leave model outputs with ids it does not name."""
    meta = copy.deepcopy(META)
    meta["num_classes"] = 2
    meta["categories"] = [
        {"id": i, "name": f"c{i}"} for i in range(1, 1 + count)
    ]
    with pytest.raises(artifact_meta.MetaError) as error:
        artifact_meta.check(meta, "predict.json", PASTERS)
    assert str(error.value) == (
        f"predict.json: categories lists {count} classes but the model has "
        "2 (num_classes); restore the exported list (names may be edited, "
        "entries not added or removed)"
    )


@pytest.mark.parametrize(
    "resize, named",
    [
        ({"min_size": 0}, "resize.min_size=0: must be an integer in [1, 4096]"),
        ({"min_size": -5, "max_size": -1}, "resize.min_size=-5: must be"),
        ({"max_size": 0}, "resize.max_size=0: must be an integer in [1, 4096]"),
        ({"max_size": 10**6}, "resize.max_size=1000000: must be"),
        ({"min_size": 64.5}, "resize.min_size=64.5: must be an integer"),
        ({"min_size": "64"}, "resize.min_size='64': must be an integer"),
    ],
)
def test_a_resize_size_outside_the_configs_range_is_named(resize, named):
    """An edited min_size of 0 once sized every image 1 x 1, silently."""
    meta = copy.deepcopy(META)
    meta["resize"] |= resize
    with pytest.raises(artifact_meta.MetaError) as error:
        artifact_meta.check(meta, "predict.json", PASTERS)
    assert str(error.value).startswith(f"predict.json: {named}")
    assert "config data." in str(error.value)


@pytest.mark.parametrize(
    "key, value",
    [
        ("canvases", [[64, 5000], [5000, 64]]),
        ("pixel_std", [1e400, 1, 1]),
        ("pixel_mean", [float("nan"), 1, 1]),
    ],
)
def test_a_value_outside_the_configs_range_is_named(key, value):
    meta = copy.deepcopy(META) | {key: value}
    with pytest.raises(artifact_meta.MetaError) as error:
        artifact_meta.check(meta, "predict.json", PASTERS)
    assert str(error.value).startswith(f"predict.json: {key}="), error.value


def test_the_ranges_are_the_configs_own():
    """One home: predict.json's fields take the config's declared ranges."""
    from detector.config import data as data_section

    ranged = dict(artifact_meta.CONFIG_FIELDS)
    for key, field in ranged.items():
        spec = data_section.RANGES[field]
        if field == "data.num_classes":
            # The config's 0 (take the annotation file's count) is resolved
            # before a run writes config.json: an artifact's count is >= 1.
            assert spec.low == 0
            spec = dataclasses.replace(
                spec, low=1, meaning=artifact_meta.RANGES[key].meaning
            )
        assert artifact_meta.RANGES[key] in (spec, getattr(spec, "item", None))


def test_a_category_id_listed_twice_is_named():
    """Detections of the id an edit dropped would be named by nothing."""
    meta = copy.deepcopy(META) | {"num_classes": 2}
    meta["categories"] = [{"id": 1, "name": "a"}, {"id": 1, "name": "b"}]
    with pytest.raises(artifact_meta.MetaError) as error:
        artifact_meta.check(meta, "predict.json", PASTERS)
    assert str(error.value) == (
        "predict.json: categories lists id 1 twice ('a', 'b'); restore the "
        "exported list (names may be edited, ids not)"
    )


def test_a_predicted_id_the_categories_do_not_list_is_named():
    """num_classes and categories edited together still pass the count
    check; the model's own ids (inside predict.jax) then give it away."""
    outputs = {
        "category_ids": np.asarray([[1, 7, 2], [2, 0, 0]]),
        "num_valid": np.asarray([2, 1]),
    }
    artifact_meta.check_predicted_ids([1, 2, 7], outputs, "predict.json")
    artifact_meta.check_predicted_ids(
        [1, 2, 9], {**outputs, "num_valid": np.asarray([1, 1])}, "predict.json"
    )
    with pytest.raises(artifact_meta.MetaError) as error:
        artifact_meta.check_predicted_ids([1, 2], outputs, "predict.json")
    assert str(error.value) == (
        "predict.json: the model predicted category id 7, which categories "
        "does not list (num_classes or categories edited?); restore the "
        "exported values or export again"
    )


def _refusal(meta: dict) -> str:
    """The one line `check` refuses `meta` with."""
    with pytest.raises(artifact_meta.MetaError) as error:
        artifact_meta.check(meta, "predict.json", PASTERS)
    return str(error.value)


def _bound(meta: dict) -> dict:
    """`meta` with the digests export.py writes of its bound values."""
    return meta | {"bound_sha256": artifact_meta.bound_digests(meta)}


@pytest.mark.parametrize(
    "key, value",
    [
        ("resize", {"rule": "shortest_edge", "min_size": 1, "max_size": 1}),
        ("resize", {"rule": "letterbox", "min_size": 64, "max_size": 96}),
        ("pixel_mean", [0.0, 0.0, 0.0]),
        ("pixel_std", [1.0, 1.0, 1.0]),
    ],
)
def test_a_value_the_program_was_exported_for_edited_is_named(key, value):
    # Every value in its range, yet not the preprocessing the serialized
    # program was exported for (1 x 1 images, 9 whole-image boxes).
    meta = _bound(copy.deepcopy(META)) | {key: value}
    assert _refusal(meta) == (
        f"predict.json: {key}={artifact_meta._shown(value)}: not the value "
        "predict.jax was exported for (bound_sha256 records it); restore "
        "the exported value or export again"
    )


def test_bound_values_as_exported_pass_after_a_json_round_trip():
    import json

    meta = json.loads(json.dumps(_bound(copy.deepcopy(META)), indent=2))
    meta["categories"][0]["name"] = "renamed"  # names may be edited
    artifact_meta.check(meta, "predict.json", PASTERS)


def test_bound_digests_are_of_the_values_alone():
    """A predict.jax replaced along with its sha256 is named by the later
    checks of what it holds, not as an edited resize."""
    meta = _bound(copy.deepcopy(META)) | {"sha256": "1" * 64}
    artifact_meta.check(meta, "predict.json", PASTERS)


def test_a_malformed_bound_sha256_is_named():
    meta = copy.deepcopy(META) | {"bound_sha256": {"resize": 5}}
    assert _refusal(meta).startswith("predict.json: bound_sha256=")
