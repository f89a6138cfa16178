"""COCO-format folders (instances JSON + images) checked and decoded into
examples in original pixels, and their COCOeval ground truth with crowd
regions (docs/bad-input.md; the example's keys: sources/base.py)."""

import contextlib
import dataclasses
import io
import json
import os
import threading

import ml_collections
import numpy as np
from absl import logging
from pycocotools import coco as coco_lib
from pycocotools import mask as mask_utils

from detector.data import coco_checks as checks
from detector.data import coco_layout, gt_boxes
from detector.data.splits import parse_split
from detector.imaging import image_file

# Images named in the line of a split whose sizes differ from their records.
SHOWN_SIZE_ERRORS = 3


def slice_bounds(split: str, num_items: int) -> tuple[int, int]:
    """[start, stop) of the items `split`'s slice picks (Python semantics).

    Percent bounds round to the closest item, as TFDS does.
    """
    _, start, stop = parse_split(split)

    def index(bound: str | None, default: int) -> int:
        if bound is None:
            return default
        if bound.endswith("%"):
            return int(round(int(bound[:-1]) * num_items / 100))
        return int(bound)

    begin, end, _ = slice(index(start, 0), index(stop, num_items)).indices(
        num_items
    )
    return begin, max(begin, end)


def build_coco(dataset: dict) -> coco_lib.COCO:
    """A `pycocotools.COCO` over an in-memory dataset dict, without prints."""
    coco = coco_lib.COCO()
    coco.dataset = dataset
    with contextlib.redirect_stdout(io.StringIO()):
        coco.createIndex()
    return coco


@dataclasses.dataclass
class _ImageTargets:
    """The usable non-crowd instances of one image (original pixels)."""

    boxes: np.ndarray  # float32 [N, 4], x1 y1 x2 y2
    classes: np.ndarray  # int32 [N]
    segmentations: list  # N COCO segmentations


class CocoFolder:
    """One split of a COCO-format folder: validated annotations and images.

    Layout: ROOT/annotations/instances_<name>.json and ROOT/<name>/<file_name>.
    `split` may slice the images sorted by id: 'val2017[:500]', 'train[:10%]'.
    """

    def __init__(
        self,
        root: str,
        split: str,
        num_classes: int,
        max_images: int = 0,
        cache: bool = False,
        allow_outside_images: bool = False,
        split_key: str = "data.train_split",
    ):
        files = coco_layout.locate(root, split, split_key)
        self.annotation_file = files.annotation_file
        self.image_dir = files.image_dir
        dataset = self._read_json()
        categories = sorted(c["id"] for c in dataset["categories"])
        if len(categories) != num_classes:
            raise ValueError(
                f"{self.annotation_file}: {len(categories)} categories but "
                f"config.data.num_classes={num_classes}; set "
                f"--config.data.num_classes={len(categories)}, or 0 to "
                "take the count from the annotation file"
            )
        self.category_ids: list[int] = categories
        images = sorted(dataset["images"], key=lambda im: im["id"])
        begin, end = slice_bounds(split, len(images))
        if begin == end:
            raise ValueError(
                f"{self.annotation_file}: split {split!r} "
                f"selects no images (of {len(images)})"
            )
        images = images[begin:end]
        if max_images > 0:
            images = images[:max_images]
        self.images: list[dict] = images
        if not allow_outside_images:
            checks.check_file_names(
                self.annotation_file, images, self.image_dir
            )
        self._check_image_files()
        self._check_image_sizes()
        self._index_annotations(dataset["annotations"], dataset)
        self._cache: dict[int, tuple] | None = {} if cache else None
        self._images: dict[int, image_file.DecodedImage] | None = (
            {} if cache else None
        )
        self._lock = threading.Lock()
        # The first error raised inside a tf.data worker, re-raised by the
        # pipeline in place of TensorFlow's wrapped error.
        self.error: Exception | None = None

    def _read_json(self) -> dict:
        """Loads the annotation JSON and checks its top-level structure."""
        path = self.annotation_file
        try:
            with open(path) as f:
                dataset = json.load(f)
        except ValueError as e:
            raise ValueError(f"{path}: not valid JSON ({e})") from None
        for key in ("images", "annotations", "categories"):
            if not isinstance(dataset, dict) or not isinstance(
                dataset.get(key), list
            ):
                raise ValueError(f"{path}: missing the {key!r} list")
        checks.check_records(path, dataset)
        return dataset

    def _check_image_files(self) -> None:
        """Raises FileNotFoundError when a listed image file is absent."""
        present = set(os.listdir(self.image_dir))
        missing = [
            im["file_name"]
            for im in self.images
            if im["file_name"] not in present
            and not os.path.exists(
                os.path.join(self.image_dir, im["file_name"])
            )
        ]
        if missing:
            more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
            raise FileNotFoundError(
                f"{os.path.join(self.image_dir, missing[0])}: image listed "
                f"in {self.annotation_file} is missing{more}"
            )

    def _index_annotations(
        self, annotations: list[dict], dataset: dict
    ) -> None:
        """Validates annotations of the selected images; builds targets + GT."""
        log = checks.SkipLog(self.annotation_file)
        clips = gt_boxes.ClipLog(self.annotation_file)
        by_id = {im["id"]: i for i, im in enumerate(self.images)}
        known_images = {im["id"] for im in dataset["images"]}
        class_of = {cid: c + 1 for c, cid in enumerate(self.category_ids)}
        selected = [a for a in annotations if a["image_id"] in by_id]
        instances = [a for a in selected if not a.get("iscrowd")]
        self.has_masks = any(a.get("segmentation") for a in instances)
        if selected and not instances:
            logging.warning(
                "%s: all %d annotations are crowd regions (no non-crowd "
                "instances); training without box and mask targets",
                self.annotation_file,
                len(selected),
            )
        elif not self.has_masks:
            logging.warning(
                "%s: no instance segmentations; training without mask targets",
                self.annotation_file,
            )
        per_image: list[list[dict]] = [[] for _ in self.images]
        ground_truth = []
        for annotation in annotations:
            image_id = annotation["image_id"]
            if image_id not in by_id:
                if image_id not in known_images:
                    log.skip(annotation, "unknown image_id")
                continue
            bbox, problem = self._annotation_problem(
                annotation, self.images[by_id[image_id]], class_of
            )
            if problem:
                log.skip(annotation, problem)
                continue
            if bbox is not annotation["bbox"]:
                clips.clip(annotation, bbox)
                annotation = dict(annotation, bbox=bbox)
            annotation = self._usable_polygons(annotation)
            ground_truth.append(annotation)
            if not annotation.get("iscrowd"):
                per_image[by_id[image_id]].append(annotation)
        log.summarize()
        clips.summarize()
        self._targets = [self._targets_of(anns, class_of) for anns in per_image]
        checks.renumber_if_needed(ground_truth, self.annotation_file)
        checks.fill_eval_defaults(
            ground_truth,
            {im["id"]: im for im in self.images},
            self.annotation_file,
        )
        self.ground_truth = {
            "info": dataset.get("info", {}),
            "images": self.images,
            "annotations": ground_truth,
            "categories": dataset["categories"],
        }

    def _usable_polygons(self, annotation: dict) -> dict:
        """`annotation` with only the usable parts of its polygon
        segmentation (`checks.polygon_parts`), for the training targets and
        COCOeval's ground truth alike; each part dropped is logged."""
        segmentation = annotation.get("segmentation")
        if not isinstance(segmentation, list):
            return annotation
        kept, dropped = checks.polygon_parts(segmentation)
        if not dropped or not kept:
            return annotation
        checks.log_dropped_parts(self.annotation_file, annotation, dropped)
        return dict(annotation, segmentation=kept)

    def _annotation_problem(
        self, annotation: dict, image: dict, class_of: dict[int, int]
    ) -> tuple[list[float] | None, str | None]:
        """(bbox fitted to the image, None), or (None, why it is unusable).

        The bbox is the annotation's own list unless it had to be clipped
        (`gt_boxes.fit_box`).
        """
        if annotation["category_id"] not in class_of:
            return None, f"unknown category_id: {annotation['category_id']}"
        height, width = image["height"], image["width"]
        bbox, problem = gt_boxes.fit_box(annotation["bbox"], width, height)
        if problem:
            return None, problem
        segmentation = annotation.get("segmentation")
        if self.has_masks:
            problem = checks.segmentation_problem(segmentation, height, width)
        else:  # without mask targets only an RLE that cannot fit matters
            problem = checks.rle_problem(segmentation, height, width)
        return (None, problem) if problem else (bbox, None)

    @staticmethod
    def _targets_of(
        annotations: list[dict], class_of: dict[int, int]
    ) -> _ImageTargets:
        """Packs one image's non-crowd annotations into arrays."""
        boxes = np.asarray(
            [a["bbox"] for a in annotations], np.float32
        ).reshape(-1, 4)
        boxes[:, 2:] += boxes[:, :2]
        classes = np.asarray(
            [class_of[a["category_id"]] for a in annotations], np.int32
        )
        return _ImageTargets(
            boxes, classes, [a.get("segmentation") for a in annotations]
        )

    @property
    def image_ids(self) -> list[int]:
        return [im["id"] for im in self.images]

    def coco(self) -> coco_lib.COCO:
        """Ground truth of the selected images, crowd regions included."""
        return build_coco(self.ground_truth)

    def read_image(
        self, index: int, needed: image_file.Needed | None = None
    ) -> image_file.DecodedImage:
        """Image `index` decoded as uint8 RGB, turned by its EXIF
        orientation; a JPEG reduced where `needed` allows
        (`image_file.read_rgb`).

        ValueError names a file that cannot be decoded or whose size is not
        the annotation file's.
        """
        info = self.images[index]
        path = os.path.join(self.image_dir, info["file_name"])
        decoded = image_file.read_rgb(path, needed=needed)
        if decoded.size != (info["height"], info["width"]):
            raise ValueError(self._size_error(path, decoded, info))
        return decoded

    def _size_error(
        self, path: str, header: image_file.ImageHeader, info: dict
    ) -> str:
        """The line of an image whose size is not its record's."""
        height, width = header.size
        turned = ""
        if header.orientation != 1:
            turned = (
                f" after its EXIF orientation {header.orientation} "
                f"(stored {header.stored_size[0]}x"
                f"{header.stored_size[1]}; annotations are read in "
                "the turned image, as COCO's tools and detectron2 do)"
            )
        return (
            f"{path}: image is {width}x{height}{turned} "
            f"but {self.annotation_file} says "
            f"{info['width']}x{info['height']}"
        )

    def _check_image_sizes(self) -> None:
        """Raises ValueError, in one line naming the first few, when an
        image's header size (once turned by its EXIF orientation) is not
        its record's: the record's size picks the canvas and scales the
        boxes, so training must not start on it (docs/bad-input.md)."""
        wrong = []
        for info in self.images:
            path = os.path.join(self.image_dir, info["file_name"])
            header = image_file.read_header(path)
            image_file.check_complete(path)  # before step 1, not at it
            if header.size != (info["height"], info["width"]):
                wrong.append((path, header, info))
        if not wrong:
            return
        line = self._size_error(*wrong[0])
        if len(wrong) > 1:
            names = [os.path.basename(path) for path, _, _ in wrong]
            shown = ", ".join(names[:SHOWN_SIZE_ERRORS])
            more = len(names) - SHOWN_SIZE_ERRORS
            line += (
                f"; {len(wrong)} images differ from their records: {shown}"
                + (f" and {more} more" if more > 0 else "")
                + "; set each record's width and height to its file's "
                "(once turned by its EXIF orientation)"
            )
        raise ValueError(line)

    def _decode_masks(self, index: int) -> np.ndarray:
        """Instance masks of image `index`, uint8 [N, h, w] (N=0 without)."""
        info = self.images[index]
        height, width = info["height"], info["width"]
        segmentations = self._targets[index].segmentations
        if not self.has_masks or not segmentations:
            return np.zeros((0, height, width), np.uint8)
        rles = [
            checks.to_rle(segmentation, height, width)
            for segmentation in segmentations
        ]
        return np.ascontiguousarray(mask_utils.decode(rles).transpose(2, 0, 1))

    def _record_errors(self, load, index: int, stand_in):
        """Runs load(index), keeping its first error for the pipeline.

        On an error it returns stand_in(index) (a blank image of the same
        size, no instances) instead of raising: an error raised inside
        tf.data would be logged by TensorFlow with its traceback, before
        the pipeline re-raises this one (one line naming the file).
        """
        try:
            return load(index)
        except Exception as e:  # re-raised as is by the pipeline
            with self._lock:
                self.error = self.error or e
            return stand_in(index)

    def _blank_image(self, index: int) -> np.ndarray:
        info = self.images[index]
        return np.zeros((info["height"], info["width"], 3), np.uint8)

    def _image_id(self, index: int) -> np.int64:
        return np.int64(self.images[index]["id"])

    def _decoded(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """(image, masks) of `index`, from the cache when enabled."""
        if self._cache is not None and index in self._cache:
            image, packed, shape = self._cache[index]
            masks = np.unpackbits(packed, count=int(np.prod(shape)))
            return image, masks.reshape(shape)
        image = self.read_image(index).pixels
        masks = self._decode_masks(index)
        if self._cache is not None:
            self._cache[index] = (image, np.packbits(masks), masks.shape)
        return image, masks

    def load_example(self, index: np.int64) -> tuple[np.ndarray, ...]:
        """(image, boxes, classes, masks, image_id) of image `index`."""

        def load(i):
            image, masks = self._decoded(i)
            targets = self._targets[i]
            return (
                image,
                targets.boxes,
                targets.classes,
                masks,
                self._image_id(i),
            )

        def blank(i):
            image = self._blank_image(i)
            return (
                image,
                np.zeros((0, 4), np.float32),
                np.zeros((0,), np.int32),
                np.zeros((0, *image.shape[:2]), np.uint8),
                self._image_id(i),
            )

        return self._record_errors(load, int(index), blank)

    def load_image(
        self, index: int, needed: image_file.Needed | None = None
    ) -> image_file.DecodedImage:
        """Image `index` for evaluation (`read_image`), kept in memory with
        `cache` (as first decoded: evaluation asks with one `needed`)."""
        if self._images is None:
            return self.read_image(index, needed)
        if index not in self._images:
            self._images[index] = self.read_image(index, needed)
        return self._images[index]


def of_config(
    data: ml_collections.ConfigDict, split: str, max_images: int = 0
) -> CocoFolder:
    """The folder of a config's data section (data.root, its split).

    Raises:
      ValueError: data.root is empty (and CocoFolder's errors).
    """
    if not data.root:
        raise ValueError(
            f"data.root is empty; data.source={data.source!r} reads a "
            "COCO-format folder"
        )
    return CocoFolder(
        data.root,
        split,
        data.num_classes,
        max_images,
        cache=data.cache,
        allow_outside_images=data.allow_outside_images,
        split_key=(
            "data.train_split"
            if split == data.train_split
            else "data.eval_split"
        ),
    )
