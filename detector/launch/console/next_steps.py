"""train.py's last line: the workdir, its final AP and the commands to run
next (eval.py, export.py, predict.py)."""

import shlex

# Result key of a workdir found trained to the end (train_lib.COMPLETE).
COMPLETE = "complete_at_step"
# The commands that follow a run, in the order a user takes them.
NEXT_COMMANDS = (
    "python eval.py --workdir={w}",
    "python export.py --workdir={w}",
    "python predict.py --workdir={w} IMAGES...",
)


def _scores(results: dict) -> str:
    """'bbox AP 0.812, segm AP 0.790', or that there is no evaluation."""
    parts = [
        f"{kind} AP {results[kind]['AP']:.3f}"
        for kind in ("bbox", "segm")
        if isinstance(results.get(kind), dict) and "AP" in results[kind]
    ]
    return ", ".join(parts) or "not evaluated"


def final_line(workdir: str, results: dict, num_steps: int) -> str:
    """One line: the workdir, its final AP and the next commands."""
    quoted = shlex.quote(str(workdir))
    commands = ", ".join(c.format(w=quoted) for c in NEXT_COMMANDS)
    if COMPLETE in results:
        head = (
            f"{workdir} is already trained to step {results[COMPLETE]} "
            f"({_scores(results)}); not evaluated again (--evaluate_finished "
            "does)"
        )
    else:
        head = f"trained {workdir} to step {num_steps}: {_scores(results)}"
    return f"{head}; next: {commands}"
