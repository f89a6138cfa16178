"""An exported predict artifact on disk (predict.jax and predict.json): load
it, check it, call it; every problem is one `ArtifactError` line
(docs/export-and-predict.md)."""

import dataclasses
import hashlib
import json
import pathlib

import jax
import numpy as np

from detector.imaging import images as images_lib
from detector.imaging import masks
from detector.predict import artifact_meta

ARTIFACT_FILE = "predict.jax"
META_FILE = "predict.json"
OUTPUTS = ("boxes", "scores", "category_ids", "masks", "num_valid")
# The artifact's batch dimension: symbolic, so one artifact takes any size.
SYMBOLIC_BATCH = "b"
# Keys of predict.json that loading relies on (artifact_meta.SCHEMA).
REQUIRED_KEYS = artifact_meta.REQUIRED_KEYS


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
    """A loaded artifact: the deserialized function and its predict.json."""

    directory: pathlib.Path
    exported: jax.export.Exported
    meta: dict

    @property
    def image_size(self) -> tuple[int, int]:
        return tuple(self.meta["image_size"])

    @property
    def resize(self) -> images_lib.Resize:
        resize = dict(self.meta["resize"])
        resize["image_size"] = tuple(resize["image_size"])
        return images_lib.Resize(**resize)


def _read_meta(path: pathlib.Path) -> dict:
    try:
        meta = json.loads(path.read_text())
    except FileNotFoundError:
        raise ArtifactError(
            f"{path}: missing (a folder written by export.py holds "
            f"{ARTIFACT_FILE} and {META_FILE})"
        ) from None
    except (OSError, ValueError) as e:
        raise ArtifactError(f"{path}: not readable JSON ({e})") from None
    try:
        artifact_meta.check(meta, str(path), tuple(masks.MASK_PASTERS))
    except artifact_meta.MetaError as e:
        raise ArtifactError(str(e)) from None
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


def _deserialize(path: pathlib.Path, data: bytes) -> jax.export.Exported:
    try:
        return jax.export.deserialize(bytearray(data))
    except Exception as e:  # noqa: BLE001 - flatbuffers raises anything
        raise ArtifactError(
            f"{path}: not a jax.export artifact this JAX can read "
            f"({type(e).__name__}: {str(e)[:120]})"
        ) from None


def load(directory: str | pathlib.Path) -> Artifact:
    """Reads and checks an export folder (predict.jax, predict.json).

    Raises:
      ArtifactError: a missing or unreadable file, an artifact whose bytes
        differ from the recorded sha256 (truncated or corrupt), or one
        serialized at a calling convention this JAX cannot run.
    """
    directory = pathlib.Path(directory)
    if not directory.is_dir():
        raise ArtifactError(f"--exported={directory}: not a folder")
    meta = _read_meta(directory / META_FILE)
    where = directory / ARTIFACT_FILE
    check_version(
        meta["calling_convention_version"],
        str(directory / META_FILE),
        meta["jax_version"],
    )
    try:
        data = where.read_bytes()
    except OSError as e:
        raise ArtifactError(f"{where}: {e.strerror or e}") from None
    if sha256(data) != meta["sha256"]:
        raise ArtifactError(
            f"{where}: its {len(data)} bytes differ from what export.py "
            f"wrote ({META_FILE} sha256): truncated or corrupt; export it "
            "again"
        )
    exported = _deserialize(where, data)
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
    _check_input_size(exported, meta, directory / META_FILE)
    return Artifact(directory, exported, meta)


def _check_input_size(
    exported: jax.export.Exported, meta: dict, where: pathlib.Path
) -> None:
    """image_size of predict.json must be the function's input size."""
    shape = exported.in_avals[0].shape
    if list(shape[1:3]) != meta["image_size"]:
        raise ArtifactError(
            f"{where}: image_size={meta['image_size']} differs from the "
            f"input size {list(shape[1:3])} of {ARTIFACT_FILE}; restore "
            "the exported value or export again"
        )


def _check_inputs(
    artifact: Artifact,
    images: np.ndarray,
    image_sizes: np.ndarray,
    orig_sizes: np.ndarray,
) -> None:
    height, width = artifact.image_size
    if (
        images.dtype != np.float32
        or images.ndim != 4
        or images.shape[1:] != (height, width, 3)
    ):
        raise ArtifactError(
            f"images: expected float32[b, {height}, {width}, 3] (the "
            f"artifact's input size), got {images.dtype}{list(images.shape)}"
        )
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


def run(
    artifact: Artifact,
    images: np.ndarray,
    image_sizes: np.ndarray,
    orig_sizes: np.ndarray,
) -> dict[str, np.ndarray]:
    """Calls the artifact on one batch; returns OUTPUTS as numpy arrays.

    Args:
      images: f32[b, H, W, 3] images resized and placed by
        `images.fitted_size` and `images.place` with `artifact.resize`.
      image_sizes: int[b, 2] each image's resized (height, width).
      orig_sizes: int[b, 2] each image's original (height, width).

    Raises:
      ArtifactError: wrong input shape or dtype, or a platform the
        artifact was not lowered for.
    """
    images = np.asarray(images)
    image_sizes = np.asarray(image_sizes)
    orig_sizes = np.asarray(orig_sizes)
    _check_inputs(artifact, images, image_sizes, orig_sizes)
    platform = jax.default_backend()
    platform = "cuda" if platform == "gpu" else platform
    if platform not in artifact.exported.platforms:
        raise ArtifactError(
            f"{artifact.directory}: lowered for "
            f"{', '.join(artifact.exported.platforms)}, not for this "
            f"{platform}; export it again with --platforms={platform}"
        )
    outputs = artifact.exported.call(
        images, image_sizes.astype(np.int32), orig_sizes.astype(np.int32)
    )
    return {k: np.asarray(v) for k, v in outputs.items()}
