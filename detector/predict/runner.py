"""Image files -> batches of one canvas each -> predictions.json and one
overlay PNG each, for both forms of predict.py
(docs/export-and-predict.md)."""

import dataclasses
import json
import os
import pathlib
import sys
import time
from collections.abc import Callable, Iterator

import numpy as np

from detector.imaging import detections, images
from detector.predict import (
    artifact,
    draw,
    output_files,
    overlay_names,
    progress,
    results_log,
    stopping,
)
from detector.utils import files, text

PREDICTIONS_FILE = output_files.PREDICTIONS_FILE
RESULTS_FILE = output_files.RESULTS_FILE
OVERLAYS_FILE = overlay_names.OVERLAYS_FILE
# The most bytes an input file may hold (read whole, then decoded).
MAX_IMAGE_BYTES = 2**32
# Detections drawn in the overlays (all are in predictions.json).
DRAW_SCORE_THRESHOLD = 0.5


@dataclasses.dataclass(frozen=True)
class Predictor:
    """What predicts: resize rule, canvases, categories, a batch function.

    `run(images f32[b, H, W, 3], image_sizes i32[b, 2], orig_sizes
    i32[b, 2])` takes a batch on one of `canvases` (in the config's order:
    one, or landscape and portrait) and returns the outputs of
    `detector.imaging.detections.OUTPUTS` as numpy arrays; `mask_paste` names
    the rule of `imaging.masks.MASK_PASTERS` (the config's eval.mask_paste).
    `identity` names the model (artifact sha256, checkpoint): results of
    another identity in predictions.jsonl are not reused.
    """

    resize: images.Resize
    canvases: tuple[images.Canvas, ...]
    categories: list[dict]
    run: Callable[[np.ndarray, np.ndarray, np.ndarray], dict[str, np.ndarray]]
    mask_paste: str = "centres"
    identity: str = ""

    def canvas_of(self, size: tuple[int, int]) -> images.Canvas:
        """The canvas of a whole (EXIF-turned) h x w image."""
        return images.pick_canvas(self.canvases, *size)

    def fitted_size(self, size: tuple[int, int]) -> tuple[int, int]:
        """(h', w') of a whole h x w image, resized on its canvas."""
        return images.fitted_on(size, self.resize, self.canvases)


class Interrupted(Exception):
    """Ctrl-C or SIGTERM stopped the run; the message says what is kept."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code  # the exit status: 130 (SIGINT) or 143 (SIGTERM)


def list_images(args: list[str]) -> list[pathlib.Path]:
    """Files named, and every file of each folder named (sorted, not hidden),
    each once (compared resolved: the first name given is kept). A link in a
    folder whose target is missing or loops is listed too, so that it is
    reported as skipped rather than dropped.

    Raises:
      ValueError: nothing named, a path that does not exist, or folders
        that hold no file.
    """
    if not args:
        raise ValueError("no images given: name image files or folders")
    found = []
    for arg in args:
        path = pathlib.Path(arg)
        if path.is_dir():
            found += sorted(
                p
                for p in path.iterdir()
                if (p.is_file() or (p.is_symlink() and not p.exists()))
                and not p.name.startswith(".")
            )
        elif path.is_file():
            found.append(path)
        elif path.exists():  # a FIFO, a device, a socket: never read
            raise files.NotRegularError(arg, files.kind_of(path))
        else:
            raise ValueError(f"{arg}: no such file or folder")
    if not found:
        raise ValueError(
            f"no image files in {', '.join(args)}: name image files or "
            "folders that hold them"
        )
    # Each file once, however it is named (`photos/../photos/a.jpg`).
    unique = {os.path.realpath(path): path for path in reversed(found)}
    return [path for path in found if unique[os.path.realpath(path)] is path]


def _file_bytes(path: pathlib.Path) -> bytes:
    """The bytes of input `path`, read once: those decoded and hashed.

    Raises:
      images.ImageReadError: it cannot be read (named, as a decode error).
    """
    try:
        return files.read_regular(path, MAX_IMAGE_BYTES)
    except OSError as e:
        raise images.ImageReadError(
            f"{path}: cannot decode image ({e.strerror or e})"
        ) from None
    except ValueError as e:  # not a regular file, or over the limit
        raise images.ImageReadError(f"cannot decode image: {e}") from None


def _readable(
    paths: list[pathlib.Path],
    predictor: Predictor,
    max_pixels: int,
    shown: progress.Progress,
    log: results_log.ResultsLog,
) -> Iterator[tuple[pathlib.Path, images.DecodedImage]]:
    """Each readable file, a JPEG decoded reduced to no less than the size
    it is resized to, its results keyed in `log` by the bytes decoded; the
    others one `skipped:` line each (counted in `shown`)."""
    for path in paths:
        try:
            data = _file_bytes(path)
            log.decoded(path, data)
            yield (
                path,
                images.read_decoded(
                    path,
                    max_pixels=max_pixels,
                    needed=predictor.fitted_size,
                    data=data,
                ),
            )
        except images.ImageReadError as e:
            print(f"skipped: {text.printable(e)}", file=sys.stderr)
            shown.advance(1)


def _batches(
    items: Iterator[tuple[pathlib.Path, images.DecodedImage]],
    predictor: Predictor,
    size: int,
) -> Iterator[list[tuple[pathlib.Path, images.DecodedImage]]]:
    """Batches of `size` images of one canvas, each as it fills (input order
    within a canvas), then the part-filled ones, first-started first."""
    pending: dict[images.Canvas, list] = {}
    for item in items:
        canvas = predictor.canvas_of(item[1].size)
        pending.setdefault(canvas, []).append(item)
        if len(pending[canvas]) == size:
            yield pending.pop(canvas)
    yield from pending.values()


@dataclasses.dataclass(frozen=True)
class Filters:
    """Which detections a run keeps: `score_threshold` (None: all in the
    results, DRAW_SCORE_THRESHOLD and up in the overlays; else that score
    and up in both) and `classes` (category ids; None: every class)."""

    score_threshold: float | None = None
    classes: frozenset[int] | None = None

    def keeps(self, result: dict) -> bool:
        """Whether `result` goes into predictions.json."""
        return (
            self.score_threshold is None
            or result["score"] >= self.score_threshold
        ) and (self.classes is None or result["category_id"] in self.classes)

    def draws(self, result: dict) -> bool:
        """Whether a kept `result` is drawn in the overlay."""
        threshold = self.score_threshold
        return result["score"] >= (
            DRAW_SCORE_THRESHOLD if threshold is None else threshold
        )

    def identity(self) -> str:
        """The filters in the resume key: results kept by other filters
        are not reused."""
        if self == Filters():
            return ""
        classes = None if self.classes is None else sorted(self.classes)
        return f" score_threshold:{self.score_threshold} classes:{classes}"


def class_filter(text: str, categories: list[dict]) -> frozenset[int]:
    """--classes=`text` (names or ids, comma-separated) -> category ids.

    Raises:
      ValueError: an entry that is no category of the model (named, with
        the model's categories).
    """
    by_name: dict[str, list[int]] = {}
    for category in categories:
        by_name.setdefault(category["name"], []).append(category["id"])
    ids = {c["id"] for c in categories}
    found = set()
    for entry in (e.strip() for e in text.split(",")):
        if entry in by_name:
            found.add(_one_id(text, entry, by_name[entry]))
        elif entry.isdigit() and int(entry) in ids:
            found.add(int(entry))
        else:
            known = ", ".join(repr(c["name"]) for c in categories[:20])
            more = ", ..." if len(categories) > 20 else ""
            raise ValueError(
                f"--classes={text}: {entry!r} is no category of the model "
                f"(name or id of: {known}{more})"
            )
    return frozenset(found)


def _one_id(text: str, name: str, ids: list[int]) -> int:
    """The id of the one category --classes=`text` names by `name`.

    Raises:
      ValueError: `name` is the name of several categories (their ids
        named: the user picks one by id).
    """
    if len(ids) == 1:
        return ids[0]
    listed = ", ".join(map(str, ids))
    raise ValueError(
        f"--classes={text}: {name!r} names {len(ids)} categories of the "
        f"model (ids {listed}); name the one you mean by its id "
        f"(--classes={ids[-1]})"
    )


def _overlay_pixels(
    path: pathlib.Path, decoded: images.DecodedImage, max_pixels: int
) -> np.ndarray | None:
    """The photo at its own size: the decode, or where the model read a
    reduced one, a full decode of the file (None, with a line, where that
    fails)."""
    if decoded.pixels.shape[:2] == decoded.size:
        return decoded.pixels
    try:
        return images.read_decoded(path, max_pixels=max_pixels).pixels
    except images.ImageReadError as e:
        print(f"no overlay: {text.printable(e)}", file=sys.stderr)
        return None


def _predict_batch(
    predictor: Predictor,
    batch: list[tuple[pathlib.Path, images.DecodedImage]],
    out: pathlib.Path,
    overlays: dict[pathlib.Path, str],
    filters: Filters,
    max_pixels: int,
) -> list[tuple[pathlib.Path, list[dict]]]:
    """Runs one batch (one canvas) and writes its overlays; (path,
    results kept by `filters`) of each.

    The model is told each whole image's size, so that its boxes are in
    whole-image pixels; the pixels it sees are resized from the decode
    (reduced for a large JPEG); the overlay is drawn at the photo's own
    size."""
    names = {c["id"]: c["name"] for c in predictor.categories}
    sizes = np.asarray([d.size for _, d in batch], np.int32)
    canvas = predictor.canvas_of(batch[0][1].size)
    resized = np.asarray(
        [predictor.fitted_size(d.size) for _, d in batch], np.int32
    )
    inputs = np.stack(
        [
            images.place(d.pixels, tuple(size), canvas)
            for (_, d), size in zip(batch, resized, strict=True)
        ]
    )
    outputs = predictor.run(inputs, resized, sizes)
    finished = []
    for i, (path, decoded) in enumerate(batch):
        found, pasted = detections.image_results(
            outputs, i, *decoded.size, predictor.mask_paste
        )
        results = [r for r in found if filters.keeps(r)]
        shown = np.asarray(
            [filters.keeps(r) and filters.draws(r) for r in found], bool
        )
        pixels = _overlay_pixels(path, decoded, max_pixels)
        if pixels is not None:
            drawn = [r for r, s in zip(found, shown, strict=True) if s]
            draw.save_overlay(
                out / overlays[path], pixels, drawn, pasted.full(shown), names
            )
        finished.append((path, results))
    return finished


def predict_files(
    predictor: Predictor,
    args: list[str],
    out: pathlib.Path,
    *,
    batch_size: int = 8,
    overwrite: bool = False,
    max_pixels: int = images.DEFAULT_MAX_PIXELS,
    quiet: bool = False,
    filters: Filters = Filters(),
) -> dict:
    """Predicts every image of `args` not already in out/predictions.jsonl
    (all of them with `overwrite`); writes out/predictions.json and
    out/<stem>.png (names kept in out/overlays.json); images over
    `max_pixels` (0: no limit) are skipped. Shows its progress on stdout
    (`progress.Progress`) unless `quiet`; keeps and draws the detections
    `filters` keep.
    Returns {"images", "skipped", "resumed", "predict_seconds"}.

    Raises:
      ValueError: no images, a missing path, batch_size < 1, or no image
        predicted (all skipped).
      Interrupted: Ctrl-C or SIGTERM (`stopping`); what finished is kept.
    """
    if batch_size < 1:
        raise ValueError(f"--batch_size={batch_size}: must be >= 1")
    paths = list_images(args)
    output_files.check_out(out, paths)
    output_files.check_own_files(out)
    out.mkdir(parents=True, exist_ok=True)
    overlays = overlay_names.assign(out, paths)
    log = results_log.ResultsLog.open(
        out / RESULTS_FILE,
        predictor.identity + filters.identity(),
        fresh=overwrite,
    )
    try:
        (out / PREDICTIONS_FILE).unlink(missing_ok=True)
        todo = [path for path in paths if log.done(path) is None]
        seconds = 0.0
        shown = progress.Progress(len(todo), quiet=quiet)
        try:
            readable = _readable(todo, predictor, max_pixels, shown, log)
            for batch in _batches(readable, predictor, batch_size):
                started = time.perf_counter()
                log.append(
                    _predict_batch(
                        predictor, batch, out, overlays, filters, max_pixels
                    )
                )
                seconds += time.perf_counter() - started
                shown.advance(len(batch))
            predictions = {
                str(path): log.done(path)
                for path in paths
                if log.done(path) is not None
            }
            earlier = log.earlier(paths, set(predictions))
            output_files.write(
                out / PREDICTIONS_FILE,
                json.dumps(predictions | earlier).encode(),
            )
            log.compact()
        except stopping.STOPS as e:
            done = sum(log.done(path) is not None for path in paths)
            raise Interrupted(
                f"interrupted: {done} of {progress.plural(len(paths))} "
                "predicted, "
                f"kept in {log.path}; rerun the same command to continue",
                stopping.exit_code(e),
            ) from None
        finally:
            shown.close()
    finally:
        log.close()
    if not predictions:
        raise ValueError(
            f"no image predicted: all {len(paths)} files were skipped (see "
            "the skipped: lines above)"
        )
    return {
        "images": len(predictions),
        "skipped": len(paths) - len(predictions),
        "resumed": len(paths) - len(todo),
        "earlier": len(earlier),
        "predict_seconds": seconds,
    }


def summary_line(summary: dict, out: pathlib.Path) -> str:
    """predict.py's last line: how many images this run predicted, how many
    were kept from an earlier run, how many skipped, and the file written."""
    new = summary["images"] - summary["resumed"]
    line = (
        f"{progress.plural(new)} predicted"
        if new
        else "no image predicted anew"
    )
    if summary["resumed"]:
        line += f", {summary['resumed']} kept from an earlier run"
    if summary["skipped"]:
        line += f", {summary['skipped']} skipped (see the skipped: lines above)"
    return f"{line}; wrote {out / PREDICTIONS_FILE}{_earlier_note(summary)}"


def _earlier_note(summary: dict) -> str:
    """What predictions.json holds besides this run's images: those of
    earlier runs into the same --out (whose overlays are beside it)."""
    earlier = summary.get("earlier", 0)
    if not earlier:
        return ""
    whole = progress.plural(summary["images"] + earlier)
    return f" ({whole}: {earlier} from earlier runs into this --out)"


def artifact_predictor(loaded: artifact.Artifact) -> Predictor:
    """A Predictor that calls an exported artifact (`artifact.load`)."""
    return Predictor(
        loaded.resize,
        loaded.canvases,
        loaded.meta["categories"],
        lambda batch, resized, sizes: artifact.run(
            loaded, batch, resized, sizes
        ),
        loaded.meta["mask_paste"],
        f"sha256:{loaded.meta['sha256']} mask_paste:"
        f"{loaded.meta['mask_paste']}",
    )
