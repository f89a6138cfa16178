"""predict.json and predict.jax read as bounded regular files, and an edited
canvas_bytes named: no real export needed (the bytes are made up, their
sha256 recorded)."""

import copy
import json
import os

import pytest

from detector.predict import artifact
from tests.detector.predict.test_artifact_meta import META


def _folder(tmp_path, data: bytes, **changes):
    """An export folder whose predict.jax is `data`, its sha256 recorded."""
    meta = copy.deepcopy(META) | {
        "sha256": artifact.sha256(data),
        "calling_convention_version": artifact.supported_versions()[1],
        "canvas_bytes": [len(data) // 2, len(data) - len(data) // 2 - 8],
        "weights_bytes": 8,
    }
    meta.update(changes)
    (tmp_path / artifact.META_FILE).write_text(json.dumps(meta))
    (tmp_path / artifact.ARTIFACT_FILE).write_bytes(data)
    return tmp_path


def _error(folder) -> str:
    with pytest.raises(artifact.ArtifactError) as error:
        artifact.load(folder)
    message = str(error.value)
    assert "\n" not in message
    return message


def test_canvas_bytes_that_cut_predict_jax_wrongly_are_named(tmp_path):
    """The file is intact (its sha256 matches): a function that does not
    deserialize means canvas_bytes was edited; its key is named."""
    folder = _folder(tmp_path, bytes(range(256)) * 8)
    message = _error(folder)
    assert message.startswith(
        f"{folder / artifact.META_FILE}: canvas_bytes=[1024, 1016]: "
    ), message
    assert "restore the exported values or export again" in message


def test_an_unreadable_function_message_is_not_cut_inside_brackets(tmp_path):
    folder = _folder(tmp_path, b"x" * 100)
    meta = json.loads((folder / artifact.META_FILE).read_text())
    for key in ("format_version", "canvas_bytes", "weights_bytes"):
        meta.pop(key)
    meta |= {"image_size": [64, 128], "resize": META["resize"]}
    meta.pop("canvases")
    (folder / artifact.META_FILE).write_text(json.dumps(meta))
    message = _error(folder)
    assert message.count("(") == message.count(")"), message


@pytest.mark.parametrize("name", [artifact.META_FILE, artifact.ARTIFACT_FILE])
def test_a_fifo_is_refused_not_waited_on(tmp_path, name):
    folder = _folder(tmp_path, b"\0" * 64)
    (folder / name).unlink()
    os.mkfifo(folder / name)
    assert _error(folder) == (
        f"{folder / name}: not a regular file (a FIFO); export.py writes "
        "regular files: export again"
    )


@pytest.mark.parametrize("name", [artifact.META_FILE, artifact.ARTIFACT_FILE])
def test_a_link_to_a_device_is_refused(tmp_path, name):
    folder = _folder(tmp_path, b"\0" * 64)
    (folder / name).unlink()
    (folder / name).symlink_to("/dev/zero")
    assert _error(folder).startswith(
        f"{folder / name}: not a regular file (a character device)"
    )


def test_a_huge_sparse_predict_json_is_refused_unread(tmp_path):
    folder = _folder(tmp_path, b"\0" * 64)
    with open(folder / artifact.META_FILE, "r+b") as f:
        f.truncate(8 * 2**30)
    assert _error(folder) == (
        f"{folder / artifact.META_FILE}: 8589934592 bytes, over the "
        f"{artifact.MAX_META_BYTES} a predict.json holds; export again"
    )


def test_a_predict_jax_of_another_size_than_recorded_is_refused_unread(
    tmp_path,
):
    folder = _folder(tmp_path, b"\0" * 64)
    with open(folder / artifact.ARTIFACT_FILE, "r+b") as f:
        f.truncate(8 * 2**30)
    assert _error(folder) == (
        f"{folder / artifact.META_FILE}: canvas_bytes=[32, 24] and "
        "weights_bytes=8 add up to 64 bytes, not the 8589934592 of "
        "predict.jax; restore the exported values or export again"
    )


@pytest.mark.parametrize(
    "text",
    ["[" * 100_000, '{"a": ' * 100_000, "{x"],
    ids=["lists", "objects", "broken"],
)
def test_json_too_deep_or_broken_is_not_readable_json(tmp_path, text):
    """Nesting deeper than Python's recursion limit is bad JSON like any
    other (it raised RecursionError)."""
    folder = _folder(tmp_path, b"x" * 100)
    (folder / artifact.META_FILE).write_text(text)
    assert _error(folder).startswith(
        f"{folder / artifact.META_FILE}: not readable JSON ("
    )
