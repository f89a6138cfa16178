"""An exported predict artifact on disk (predict.jax and predict.json): load
it and its weights, check it, call the function of a batch's canvas; every
problem is one `ArtifactError` line (docs/export-and-predict.md)."""

import dataclasses
import hashlib
import itertools
import json
import pathlib

import jax
import numpy as np

from detector.imaging import detections, masks
from detector.imaging import images as images_lib
from detector.predict import artifact_meta
from detector.utils import files

ARTIFACT_FILE = "predict.jax"
META_FILE = "predict.json"
OUTPUTS = detections.OUTPUTS  # the contract: imaging/detections.py
# The arguments after the weights: images, image_sizes, orig_sizes.
_INPUTS = 3
# The artifact's batch dimension: symbolic, so one artifact takes any size.
SYMBOLIC_BATCH = "b"
# Keys of predict.json that loading relies on (artifact_meta.SCHEMA).
REQUIRED_KEYS = artifact_meta.REQUIRED_KEYS
# The most bytes a predict.json holds: its keys and a category list far
# longer than any dataset's (LVIS' 1203 take 60 KB).
MAX_META_BYTES = 16 * 2**20
# The most bytes one serialized function can hold (flatbuffers' 2 GiB
# offsets): the bound of a format 1 predict.jax, which records no size.
MAX_FUNCTION_BYTES = 2**31 - 1


class ArtifactError(ValueError):
    """An unusable artifact or bad input to it; the message is one line."""


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def supported_versions() -> tuple[int, int]:
    """The calling convention versions this JAX can run (inclusive)."""
    return (
        jax.export.minimum_supported_calling_convention_version,
        jax.export.maximum_supported_calling_convention_version,
    )


def check_version(version: object, where: str, jax_version: str) -> None:
    """Raises ArtifactError unless this JAX runs calling convention
    `version`."""
    low, high = supported_versions()
    if not isinstance(version, int) or not low <= version <= high:
        raise ArtifactError(
            f"{where}: serialized with JAX {jax_version} at calling "
            f"convention version {version!r}; JAX {jax.__version__} runs "
            f"versions {low} to {high}: export it again with this JAX"
        )


@dataclasses.dataclass(frozen=True)
class Artifact:
    """A loaded artifact: its deserialized functions, one per canvas in the
    order of predict.json's "canvases", predict.json in the current
    format's keys (`artifact_meta.current`) and the weights every function
    takes first, on the device (None: inside each function, format < 3)."""

    directory: pathlib.Path
    functions: tuple[jax.export.Exported, ...]
    meta: dict
    weights: list[jax.Array] | None = None

    @property
    def canvases(self) -> tuple[images_lib.Canvas, ...]:
        return tuple((int(h), int(w)) for h, w in self.meta["canvases"])

    @property
    def platforms(self) -> tuple[str, ...]:
        return self.functions[0].platforms

    @property
    def resize(self) -> images_lib.Resize:
        return images_lib.Resize(**self.meta["resize"])


def _read(path: pathlib.Path, limit: int) -> bytes:
    """The bytes of `path`, a regular file.

    Raises:
      ArtifactError: missing, not a regular file, or unreadable.
      files.OverLimitError: more than `limit` bytes (the caller names why).
    """
    try:
        return files.read_regular(path, limit)
    except FileNotFoundError:
        raise ArtifactError(
            f"{path}: missing (a folder written by export.py holds "
            f"{ARTIFACT_FILE} and {META_FILE})"
        ) from None
    except files.NotRegularError as e:
        raise ArtifactError(
            f"{e}; export.py writes regular files: export again"
        ) from None
    except OSError as e:
        raise ArtifactError(f"{path}: {e.strerror or e}") from None


def _read_meta(path: pathlib.Path) -> dict:
    try:
        data = _read(path, MAX_META_BYTES)
    except files.OverLimitError as e:
        raise ArtifactError(
            f"{path}: {e.size} bytes, over the {MAX_META_BYTES} a "
            f"{META_FILE} holds; export again"
        ) from None
    try:
        meta = json.loads(data)
    except (ValueError, RecursionError) as e:  # nesting past the stack
        raise ArtifactError(f"{path}: not readable JSON ({e})") from None
    try:
        artifact_meta.check(meta, str(path), tuple(masks.MASK_PASTERS))
    except artifact_meta.MetaError as e:
        raise ArtifactError(str(e)) from None
    meta = artifact_meta.current(meta)
    resize = meta["resize"]
    if (
        set(resize) != set(images_lib.Resize._fields)
        or resize["rule"] not in images_lib.RESIZE_RULES
    ):
        raise ArtifactError(
            f"{path}: resize={resize!r}: must be a rule of "
            f"{', '.join(images_lib.RESIZE_RULES)} with its sizes"
        )
    return meta


def _deserialize(
    path: pathlib.Path, data: bytes, meta: dict, meta_path: pathlib.Path
) -> jax.export.Exported:
    """One function of predict.jax (whose bytes match the recorded sha256:
    one that does not deserialize was cut wrongly by an edited
    canvas_bytes, where there is one)."""
    try:
        return jax.export.deserialize(bytearray(data))
    except Exception as e:  # noqa: BLE001 - flatbuffers raises anything
        if meta["canvas_bytes"] is not None:
            raise ArtifactError(
                f"{meta_path}: canvas_bytes={meta['canvas_bytes']}: a "
                f"function of {ARTIFACT_FILE} cut by these counts does not "
                "deserialize (the counts edited, or the file replaced along "
                "with its sha256); restore the exported values or export "
                "again"
            ) from None
        raise ArtifactError(
            f"{path}: not a jax.export artifact this JAX can read "
            f"({type(e).__name__} while deserializing); export it again"
        ) from None


def _recorded_bytes(meta: dict) -> int | None:
    """The bytes predict.json says predict.jax holds (None: format 1)."""
    if meta["canvas_bytes"] is None:
        return None
    return sum(meta["canvas_bytes"]) + (meta["weights_bytes"] or 0)


def _sizes_differ(meta: dict, where: pathlib.Path, size: int) -> ArtifactError:
    """predict.json's byte counts, which do not add up to `size`."""
    counts, weights = meta["canvas_bytes"], meta["weights_bytes"]
    keys = f"canvas_bytes={counts}"
    if weights is not None:
        keys += f" and weights_bytes={weights}"
    return ArtifactError(
        f"{where}: {keys} add up to {_recorded_bytes(meta)} bytes, not the "
        f"{size} of {ARTIFACT_FILE}; restore the exported values or export "
        "again"
    )


def _split(
    data: bytes, meta: dict, where: pathlib.Path
) -> tuple[list[bytes], memoryview | None]:
    """predict.jax cut into its functions (`canvas_bytes`; None: one
    function, all of it) and its weights section (None before format 3)."""
    counts, weights = meta["canvas_bytes"], meta["weights_bytes"]
    if counts is None:
        return [data], None
    if _recorded_bytes(meta) != len(data):
        raise _sizes_differ(meta, where, len(data))
    ends = list(itertools.accumulate(counts))
    blobs = [data[end - n : end] for n, end in zip(counts, ends, strict=True)]
    return blobs, None if weights is None else memoryview(data)[ends[-1] :]


def _weight_types(
    functions: tuple[jax.export.Exported, ...], where: pathlib.Path
) -> list:
    """The types of the weights the functions take first (all alike)."""
    types = [f.in_avals[:-_INPUTS] for f in functions]
    if any(t != types[0] for t in types):
        raise ArtifactError(
            f"{where}: its functions take different weights; export it again"
        )
    return list(types[0])


def _weights(
    functions: tuple[jax.export.Exported, ...],
    meta: dict,
    section: memoryview | None,
    where: pathlib.Path,
    meta_path: pathlib.Path,
) -> list[jax.Array] | None:
    """The weights section as the functions' first argument, on the device
    (None when the functions hold the weights themselves)."""
    types = _weight_types(functions, where)
    if section is None:
        if types:
            raise ArtifactError(
                f"{meta_path}: format_version={meta['format_version']} but "
                f"the functions of {ARTIFACT_FILE} take the weights as an "
                "argument; restore the exported value or export again"
            )
        return None
    sizes = [t.size * t.dtype.itemsize for t in types]
    if sum(sizes) != len(section):
        raise ArtifactError(
            f"{meta_path}: weights_bytes={len(section)} differs from the "
            f"{sum(sizes)} bytes of the weights the functions of "
            f"{ARTIFACT_FILE} take; restore the exported value or export again"
        )
    ends = itertools.accumulate(sizes)
    leaves = [
        np.frombuffer(section[end - n : end], t.dtype).reshape(t.shape)
        for t, n, end in zip(types, sizes, ends, strict=True)
    ]
    return jax.device_put(leaves)


def load(directory: str | pathlib.Path) -> Artifact:
    """Reads and checks an export folder (predict.jax, predict.json), of
    this format or an earlier one (weights inside each function), and puts
    its weights on the device once.

    Raises:
      ArtifactError: a missing or unreadable file, an artifact whose bytes
        differ from the recorded sha256 (truncated or corrupt), one
        serialized at a calling convention this JAX cannot run, or
        functions whose input sizes are not the canvases recorded.
    """
    directory = pathlib.Path(directory)
    if not directory.is_dir():
        raise ArtifactError(f"--exported={directory}: not a folder")
    meta_path = directory / META_FILE
    meta = _read_meta(meta_path)
    where = directory / ARTIFACT_FILE
    check_version(
        meta["calling_convention_version"], str(meta_path), meta["jax_version"]
    )
    data = _read_artifact(where, meta, meta_path)
    if sha256(data) != meta["sha256"]:
        raise ArtifactError(
            f"{where}: its {len(data)} bytes differ from what export.py "
            f"wrote ({META_FILE} sha256): truncated or corrupt; export it "
            "again"
        )
    blobs, section = _split(data, meta, meta_path)
    functions = tuple(
        _deserialize(where, blob, meta, meta_path) for blob in blobs
    )
    for exported in functions:
        check_version(exported.calling_convention_version, str(where), "?")
        if (
            exported.calling_convention_version
            != meta["calling_convention_version"]
        ):
            raise ArtifactError(
                f"{where}: calling convention version "
                f"{exported.calling_convention_version} differs from "
                f"{meta['calling_convention_version']} in {META_FILE}"
            )
    _check_input_sizes(functions, meta, meta_path)
    weights = _weights(functions, meta, section, where, meta_path)
    return Artifact(directory, functions, meta, weights)


def _read_artifact(
    where: pathlib.Path, meta: dict, meta_path: pathlib.Path
) -> bytes:
    """predict.jax, never more than the bytes predict.json records (format
    1 records none: one function's most)."""
    recorded = _recorded_bytes(meta)
    try:
        return _read(where, recorded or MAX_FUNCTION_BYTES)
    except files.OverLimitError as e:
        if recorded is not None:
            raise _sizes_differ(meta, meta_path, e.size) from None
        raise ArtifactError(
            f"{where}: {e.size} bytes, over the {MAX_FUNCTION_BYTES} one "
            "serialized function can hold: not a predict.jax; export again"
        ) from None


def _check_input_sizes(
    functions: tuple[jax.export.Exported, ...],
    meta: dict,
    where: pathlib.Path,
) -> None:
    """The canvases of predict.json must be the functions' input sizes."""
    sizes = [list(f.in_avals[-_INPUTS].shape[1:3]) for f in functions]
    if sizes == meta["canvases"]:
        return
    if artifact_meta.version(meta) == 1:
        key, value = "image_size", meta["canvases"][0]
        found = f"input size {sizes[0]}"
    else:
        key, value = "canvases", meta["canvases"]
        found = f"input sizes {sizes}"
    raise ArtifactError(
        f"{where}: {key}={value} differs from the {found} of "
        f"{ARTIFACT_FILE}; restore the exported value or export again"
    )


def _shapes(canvases: tuple[images_lib.Canvas, ...]) -> str:
    return " or ".join(f"float32[b, {h}, {w}, 3]" for h, w in canvases)


def _check_inputs(
    artifact: Artifact,
    images: np.ndarray,
    image_sizes: np.ndarray,
    orig_sizes: np.ndarray,
) -> int:
    """The index of the canvas `images` are on, once the inputs are checked."""
    shapes = [(*canvas, 3) for canvas in artifact.canvases]
    if (
        images.dtype != np.float32
        or images.ndim != 4
        or images.shape[1:] not in shapes
    ):
        served = "canvas" if len(shapes) == 1 else "canvases"
        raise ArtifactError(
            f"images: expected {_shapes(artifact.canvases)} (the artifact's "
            f"{served}), got {images.dtype}{list(images.shape)}"
        )
    index = shapes.index(images.shape[1:])
    height, width = artifact.canvases[index]
    for name, sizes in (
        ("image_sizes", image_sizes),
        ("orig_sizes", orig_sizes),
    ):
        if sizes.shape != (images.shape[0], 2) or not np.issubdtype(
            sizes.dtype, np.integer
        ):
            raise ArtifactError(
                f"{name}: expected int[{images.shape[0]}, 2] (height, "
                f"width per image), got {sizes.dtype}{list(sizes.shape)}"
            )
    if images.shape[0] < 1 or (orig_sizes < 1).any() or (image_sizes < 1).any():
        raise ArtifactError(
            "images: need at least one image, each at least 1 x 1 pixels"
        )
    if (image_sizes > np.asarray([height, width])).any():
        raise ArtifactError(
            f"image_sizes: each must fit the {height} x {width} input"
        )
    return index


def run(
    artifact: Artifact,
    images: np.ndarray,
    image_sizes: np.ndarray,
    orig_sizes: np.ndarray,
) -> dict[str, np.ndarray]:
    """Calls the function of the batch's canvas (its images' H, W) on one
    batch; returns OUTPUTS as numpy arrays.

    Args:
      images: f32[b, H, W, 3] images on one of `artifact.canvases`
        (`images.pick_canvas`), resized and placed by `images.fitted_size`
        and `images.place` with `artifact.resize`.
      image_sizes: int[b, 2] each image's resized (height, width).
      orig_sizes: int[b, 2] each image's original (height, width).

    Raises:
      ArtifactError: wrong input shape or dtype, a platform the artifact
        was not lowered for, or a predicted category id that predict.json
        does not list (edited).
    """
    images = np.asarray(images)
    image_sizes = np.asarray(image_sizes)
    orig_sizes = np.asarray(orig_sizes)
    index = _check_inputs(artifact, images, image_sizes, orig_sizes)
    platform = jax.default_backend()
    platform = "cuda" if platform == "gpu" else platform
    if platform not in artifact.platforms:
        raise ArtifactError(
            f"{artifact.directory}: lowered for "
            f"{', '.join(artifact.platforms)}, not for this "
            f"{platform}; export it again with --platforms={platform}"
        )
    weights = () if artifact.weights is None else (artifact.weights,)
    outputs = artifact.functions[index].call(
        *weights,
        images,
        image_sizes.astype(np.int32),
        orig_sizes.astype(np.int32),
    )
    outputs = {k: np.asarray(v) for k, v in outputs.items()}
    try:
        artifact_meta.check_predicted_ids(
            [c["id"] for c in artifact.meta["categories"]],
            outputs,
            str(artifact.directory / META_FILE),
        )
    except artifact_meta.MetaError as e:
        raise ArtifactError(str(e)) from None
    return outputs
