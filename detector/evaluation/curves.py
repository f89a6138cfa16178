"""`<workdir>/curves.png`: the losses, learning rate and AP of a run
against step, from metrics.jsonl and the eval results (docs/training.md)."""

import io
import json
import pathlib
import shlex
from typing import TYPE_CHECKING

from detector.modeling import losses
from detector.utils import files, pyplot

if TYPE_CHECKING:
    from matplotlib.figure import Figure

FILE_NAME = "curves.png"
# Panel -> the series it draws, each a metrics.jsonl key (AP: eval lines'
# and eval results' `<task>.AP`).
PANELS = {
    "loss": losses.LOSS_NAMES,
    "learning rate": ("learning_rate",),
    "AP": ("bbox AP", "segm AP"),
}

Series = dict[str, tuple[list[int], list[float]]]  # name -> (steps, values)


def _lines(path: pathlib.Path) -> list[dict]:
    """The JSON objects of a .jsonl file; lines cut short are skipped."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError):
        return []
    lines = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("step"), int):
            lines.append(record)
    return lines


def _results(workdir: pathlib.Path, stem: str) -> list[dict]:
    """The eval results `<stem>.json` and `<stem>_step<N>.json` (eval.py)
    of `workdir` that record a step."""
    found = []
    for path in [workdir / f"{stem}.json", *workdir.glob(f"{stem}_step*.json")]:
        try:
            result = json.loads(path.read_text())
        except (OSError, ValueError, UnicodeDecodeError):
            continue
        if isinstance(result, dict) and isinstance(result.get("step"), int):
            found.append(result)
    return found


def series(workdir: str | pathlib.Path, result_stem: str) -> Series:
    """Each plotted series, in step order: the training lines' losses and
    learning rate, and bbox and segm AP of the eval lines of metrics.jsonl
    and of the result files named `result_stem` (a file's AP replaces a
    line's of the same step)."""
    workdir = pathlib.Path(workdir)
    points: dict[str, dict[int, float]] = {}
    records = _lines(workdir / "metrics.jsonl")
    for record in [*records, *_results(workdir, result_stem)]:
        evaluated = record.get("eval") or "split" in record
        for name in PANELS["loss"] + PANELS["learning rate"]:
            if not evaluated and isinstance(record.get(name), int | float):
                points.setdefault(name, {})[record["step"]] = record[name]
        for task in ("bbox", "segm"):
            metrics = record.get(task)
            if evaluated and isinstance(metrics, dict) and "AP" in metrics:
                points.setdefault(f"{task} AP", {})[record["step"]] = metrics[
                    "AP"
                ]
    return {
        name: (
            [s for s in sorted(by_step)],
            [by_step[s] for s in sorted(by_step)],
        )
        for name, by_step in points.items()
    }


def figure(curves: Series) -> "Figure":
    """One panel per PANELS entry with data, each series a line against
    step (the losses on a log scale)."""
    from matplotlib import ticker

    plt = pyplot.pyplot()
    panels = [
        (title, [n for n in names if n in curves])
        for title, names in PANELS.items()
    ]
    panels = [(title, names) for title, names in panels if names]
    fig, axes = plt.subplots(
        1, len(panels), figsize=(5 * len(panels), 3.6), squeeze=False
    )
    for ax, (title, names) in zip(axes[0], panels, strict=True):
        for name in names:
            steps, values = curves[name]
            ax.plot(
                steps,
                values,
                marker="o" if len(steps) < 20 else None,
                markersize=3,
                label=name,
            )
        if title == "loss" and all(v > 0 for n in names for v in curves[n][1]):
            ax.set_yscale("log")
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(ticker.MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        if len(names) > 1:
            ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def draw(workdir: str | pathlib.Path, result_stem: str) -> pathlib.Path | None:
    """Writes `<workdir>/curves.png` (whole, as files.write_bytes) from
    `series`; returns its path, or None where there is nothing to draw."""
    curves = series(workdir, result_stem)
    if not curves:
        return None
    fig = figure(curves)
    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format="png", dpi=100)
    finally:
        pyplot.pyplot().close(fig)
    path = pathlib.Path(workdir) / FILE_NAME
    files.write_bytes(path, buffer.getvalue())
    return path


def note(workdir: str | pathlib.Path) -> str:
    """'curves: <workdir>/curves.png (all events: tensorboard --logdir
    <workdir>)', for the last line of a run that drew them."""
    path = pathlib.Path(workdir) / FILE_NAME
    return (
        f"curves: {path} (all events: tensorboard --logdir "
        f"{shlex.quote(str(workdir))})"
    )
