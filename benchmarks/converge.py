"""Trains the shapes recipe per NMS backend and checks that it learns.

    python benchmarks/converge.py                        # the default backend
    python benchmarks/converge.py --backends=cpu,while_loop,pallas

Each backend trains `python train.py --nms=BACKEND` (plus any --override
given) into `<root>/<backend>` in a subprocess, timed by wall clock; a
workdir that already holds a finished run is read, not retrained, unless
--retrain. From each run's metrics.jsonl it reads the loss curve and the
COCO AP of every evaluation, then:
  - plots loss and box/mask AP over steps, one line per backend
    (converge.png), and writes converge.json under --out;
  - prints the losses at fixed steps side by side with the largest
    difference between backends (identical NMS results should give
    identical training);
  - exits non-zero when a run's final box AP or mask AP is below
    --min_box_ap / --min_mask_ap, or when it took longer than
    --max_minutes (0: no time check).
"""

import argparse
import json
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
LOSSES = ("total", "rpn_cls", "rpn_box", "cls", "box", "mask")


def train(
    backend: str, workdir: pathlib.Path, config: str, overrides: list[str]
) -> float:
    """Runs train.py for one backend; returns its wall time in seconds."""
    command = [
        sys.executable,
        str(ROOT / "train.py"),
        f"--config={config}",
        f"--workdir={workdir}",
        f"--nms={backend}",
        *overrides,
    ]
    print("+", " ".join(command), flush=True)
    started = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True)
    return time.perf_counter() - started


def read_run(workdir: pathlib.Path) -> dict:
    """Loss curve and evaluations from a run's metrics.jsonl."""
    path = workdir / "metrics.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path}: no metrics; the run did not start")
    steps = {}
    evals = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if record.get("eval"):
            evals[record["step"]] = {
                "box_ap": record["bbox"]["AP"],
                "mask_ap": record.get("segm", {}).get("AP", float("nan")),
            }
        else:
            steps[record["step"]] = record  # a resumed run rewrites a step
    losses = {name: [steps[s][name] for s in sorted(steps)] for name in LOSSES}
    return {
        "steps": sorted(steps),
        "losses": losses,
        "step_time_ms": [steps[s]["step_time_ms"] for s in sorted(steps)],
        "eval_steps": sorted(evals),
        "box_ap": [evals[s]["box_ap"] for s in sorted(evals)],
        "mask_ap": [evals[s]["mask_ap"] for s in sorted(evals)],
    }


def finished(workdir: pathlib.Path) -> bool:
    """Whether the run in `workdir` trained all its steps and evaluated."""
    config_path = workdir / "config.json"
    if not (config_path.exists() and (workdir / "metrics.jsonl").exists()):
        return False
    num_steps = json.loads(config_path.read_text())["train"]["num_steps"]
    run = read_run(workdir)
    return bool(run["eval_steps"]) and run["eval_steps"][-1] >= num_steps


def loss_table(runs: dict, every: int) -> str:
    """Total loss per backend at every `every`-th logged step."""
    names = list(runs)
    first = runs[names[0]]
    lines = [
        "| step | " + " | ".join(names) + " | max difference |",
        "|---" * (len(names) + 2) + "|",
    ]
    for i, step in enumerate(first["steps"]):
        if (i + 1) % every and i + 1 != len(first["steps"]):
            continue
        values = [
            r["losses"]["total"][i] if i < len(r["steps"]) else float("nan")
            for r in runs.values()
        ]
        spread = max(values) - min(values)
        lines.append(
            f"| {step} | "
            + " | ".join(f"{v:.6f}" for v in values)
            + f" | {spread:.2e} |"
        )
    return "\n".join(lines)


def plot(runs: dict, path: pathlib.Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    styles = ["-", "--", ":", "-."]
    for i, (name, run) in enumerate(runs.items()):
        style = styles[i % len(styles)]
        left.plot(run["steps"], run["losses"]["total"], style, label=name)
        right.plot(
            run["eval_steps"],
            run["box_ap"],
            style,
            marker="o",
            label=f"box AP ({name})",
        )
        right.plot(
            run["eval_steps"],
            run["mask_ap"],
            style,
            marker="s",
            label=f"mask AP ({name})",
        )
    left.set_yscale("log")
    left.set_xlabel("step")
    left.set_ylabel("total loss (log scale)")
    left.legend(fontsize=8)
    right.set_xlabel("step")
    right.set_ylabel("COCO AP @[.50:.95]")
    right.set_ylim(0.0, 1.0)
    right.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default="configs/shapes.py")
    parser.add_argument(
        "--backends",
        default="auto",
        help="comma-separated NMS backends to train",
    )
    parser.add_argument(
        "--root", type=pathlib.Path, default=pathlib.Path("workdirs/converge")
    )
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        help="extra train.py flag, e.g. "
        "--override=--config.train.num_steps=500",
    )
    parser.add_argument("--retrain", action="store_true")
    parser.add_argument("--min_box_ap", type=float, default=0.70)
    parser.add_argument("--min_mask_ap", type=float, default=0.65)
    parser.add_argument("--max_minutes", type=float, default=0.0)
    parser.add_argument(
        "--table_every",
        type=int,
        default=4,
        help="loss table row every N logged steps",
    )
    parser.add_argument(
        "--out", type=pathlib.Path, default=pathlib.Path("benchmarks/out")
    )
    args = parser.parse_args()

    runs, minutes, failures = {}, {}, []
    for backend in args.backends.split(","):
        workdir = args.root / backend
        if args.retrain or not finished(workdir):
            if workdir.exists() and args.retrain:
                subprocess.run(["rm", "-rf", str(workdir)], check=True)
            minutes[backend] = (
                train(backend, workdir, args.config, args.override) / 60
            )
        runs[backend] = read_run(workdir)
        run = runs[backend]
        box_ap, mask_ap = run["box_ap"][-1], run["mask_ap"][-1]
        took = (
            f"{minutes[backend]:.1f} min wall"
            if backend in minutes
            else "read from an earlier run"
        )
        print(
            f"{backend}: step {run['eval_steps'][-1]}, box AP "
            f"{box_ap:.3f}, mask AP {mask_ap:.3f} ({took})"
        )
        if box_ap < args.min_box_ap:
            failures.append(
                f"{backend}: box AP {box_ap:.3f} < {args.min_box_ap}"
            )
        if not mask_ap >= args.min_mask_ap:
            failures.append(
                f"{backend}: mask AP {mask_ap:.3f} < {args.min_mask_ap}"
            )
        if args.max_minutes and minutes.get(backend, 0) > args.max_minutes:
            failures.append(
                f"{backend}: {minutes[backend]:.1f} min > {args.max_minutes}"
            )

    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "converge.json").write_text(
        json.dumps(
            {
                "config": args.config,
                "overrides": args.override,
                "wall_minutes": minutes,
                "runs": runs,
            },
            indent=2,
        )
    )
    plot(
        runs,
        args.out / "converge.png",
        f"{args.config}: loss and COCO AP per NMS backend",
    )
    print("\nTotal loss at fixed steps\n")
    print(loss_table(runs, args.table_every))
    for failure in failures:
        print(f"error: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
