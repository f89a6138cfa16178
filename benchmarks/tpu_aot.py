"""The train step, predict and the exported artifact compiled for a TPU
topology on a host without a TPU (the `tpu` extra: libtpu), with the
compiler's HBM use and cost model per NMS backend (docs/tpu.md).

    python benchmarks/tpu_aot.py --config=configs/shapes.py --topology=v5e:2x2
    python benchmarks/tpu_aot.py --config=configs/coco_r50_fpn.py \
        --topology=v5e:2x2,v6e:2x2 --batch_per_chip=8 --programs=train_step
    python benchmarks/tpu_aot.py --config=configs/coco_r50_fpn.py \
        --topology=v5e:2x2 --fit --write_fit      # HBM fit, per chip kind
    python benchmarks/tpu_aot.py --config=configs/coco_r50_fpn_lsj.py \
        --topology=v5e:4x4 --collectives --programs=train_step --backends=pallas

For each topology and NMS backend of `--backends` (those that run on TPU:
pallas, the Mosaic kernel, and while_loop) it compiles each program of
`--programs` on each canvas of the config (benchmarks/tpu_compile.py) and
prints per program: the peak HBM per chip (memory_analysis), and XLA's
cost model per chip: GFLOP, GB accessed and `optimal_seconds` (the
compiler's estimate, not a measurement), with the Mosaic kernel calls the
compiled program holds. Writes tpu_aot.json under --out.

`--fit` gives the largest train batch per chip that fits each topology's
chip (detector/launch/tpu_fit.py's rule, from the train step compiled at
--batch_per_chip, or from a saved tpu_aot.json with --fit_from) and checks
the config's own batch against it; `--write_fit` stores the rows in
detector/launch/tpu_fit_table.py, which train.py reads on a TPU.
`--collectives` lists the collectives XLA inserted into the compiled train
step and their bytes; `--nms_alone` also compiles ops.nms by itself (2
images x 4000 boxes, K=1000) per backend.
"""

import functools
import json
import pathlib
import sys
import time
from collections.abc import Iterator
from typing import Any

_REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(_REPO))

from detector.launch.console import logs  # noqa: E402

if __name__ == "__main__":  # before TensorFlow and libtpu load
    logs.quiet_libraries(0)

import jax  # noqa: E402
import jaxlib  # noqa: E402
from absl import app, flags  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from benchmarks import batch_file, collectives, tpu_compile  # noqa: E402
from detector.imaging import canvases  # noqa: E402
from detector.launch import cli, tpu_fit, tpu_fit_table  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file(
    "config", str(_REPO / "configs" / "shapes.py"), "Config to compile."
)
_TOPOLOGY = flags.DEFINE_list(
    "topology", "v5e:2x2", "TPU topologies, e.g. v4:2x2x1,v5e:2x2,v6e:2x2."
)
_BACKENDS = flags.DEFINE_list(
    "backends", "pallas,while_loop", "NMS backends (both sites)."
)
_PROGRAMS = flags.DEFINE_list(
    "programs",
    ",".join(tpu_compile.PROGRAMS),
    f"Programs to compile, of {', '.join(tpu_compile.PROGRAMS)}.",
)
_BATCH_PER_CHIP = flags.DEFINE_integer(
    "batch_per_chip",
    None,
    "Train and eval images per chip (default: the config's batches over "
    "the topology's chips).",
)
_FIT = flags.DEFINE_bool(
    "fit",
    False,
    "The largest train batch per chip that fits HBM, from the train step.",
)
_FIT_FROM = flags.DEFINE_string(
    "fit_from",
    None,
    "With --fit: take the train step's memory from this tpu_aot.json of "
    "the same config instead of compiling.",
)
_WRITE_FIT = flags.DEFINE_bool(
    "write_fit", False, "With --fit: store the rows for train.py."
)
_COLLECTIVES = flags.DEFINE_bool(
    "collectives", False, "List the compiled train step's collectives."
)
_NMS_ALONE = flags.DEFINE_bool(
    "nms_alone", False, "Also compile ops.nms alone per backend."
)
_OUT = flags.DEFINE_string("out", "benchmarks/out", "Output folder.")

_CANVASES = flags.DEFINE_enum(
    "canvases",
    "all",
    ["all", "first"],
    "Each canvas of the config, or its first.",
)
_CHECK_LIBTPU = flags.DEFINE_bool(
    "check_libtpu",
    False,
    "Only describe --topology's chips (fails where libtpu cannot) and exit.",
)
_TABLE_FILE = _REPO / "detector" / "launch" / "tpu_fit_table.py"


def versions() -> str:
    """'JAX x, libtpu y' of this process."""
    from importlib import metadata

    try:
        libtpu = metadata.version("libtpu")
    except metadata.PackageNotFoundError:
        libtpu = "?"
    return (
        f"JAX {jax.__version__} (jaxlib {jaxlib.__version__}), libtpu {libtpu}"
    )


def with_batch(config, chips: int, per_chip: int | None):
    """`config` with train and eval batches of `per_chip` per chip."""
    if per_chip is None:
        return config
    config = config.copy_and_resolve_references()
    with config.unlocked():
        config.train.batch_size = per_chip * chips
        config.eval.batch_size = per_chip * chips
    return config


def program_canvases(config, program: str) -> tuple:
    """The canvases `program` runs on (training's for the train step)."""
    if program == "train_step":
        return canvases.training(config.data)
    return tuple(dict.fromkeys(canvases.canvases(config.data)))


def line(r: tpu_compile.Report) -> str:
    """One table row of a report."""
    c = r.cost
    return (
        f"| {r.program} | {r.canvas[0]}x{r.canvas[1]} | {r.batch} | "
        f"{r.hbm_bytes / 2**30:.2f} | {c.get('flops', 0) / 1e9:.0f} | "
        f"{c.get('bytes accessed', 0) / 1e9:.1f} | "
        f"{c.get('optimal_seconds', 0) * 1e3:.1f} | {r.mosaic_calls} |"
    )


HEADER = (
    "| program | canvas | batch (global) | HBM GiB/chip | GFLOP/chip "
    "| GB accessed/chip | optimal ms | Mosaic calls |\n"
    "|---|---|---|---|---|---|---|---|"
)


def compile_all(
    config, topology: str, backend: str
) -> Iterator[dict[str, Any]]:
    """Each program of --programs on each of its canvases (and ops.nms
    alone with --nms_alone): prints a row and yields a result per compile,
    writing each program's HLO under --out/hlo."""
    mesh = tpu_compile.topology_mesh(topology)
    config = tpu_compile.for_tpu(
        with_batch(config, mesh.size, _BATCH_PER_CHIP.value), backend
    )
    kind = tpu_compile.device_kind(mesh)
    print(f"\n{topology} ({mesh.size} x {kind}), NMS {backend}\n{HEADER}")
    runs = []
    if _NMS_ALONE.value:
        runs.append(
            ("nms", functools.partial(tpu_compile.compile_nms, mesh, backend))
        )
    for program in _PROGRAMS.value:
        found_canvases = program_canvases(config, program)
        if _CANVASES.value == "first":
            found_canvases = found_canvases[:1]
        compile_fn = tpu_compile.COMPILERS[program]
        runs += [
            (program, functools.partial(compile_fn, config, mesh, c))
            for c in found_canvases
        ]
    for program, run in runs:
        started = time.perf_counter()
        r = run()
        print(line(r), flush=True)
        name = f"{topology}_{backend}_{r.program}_{r.canvas[0]}x{r.canvas[1]}"
        hlo = pathlib.Path(_OUT.value, "hlo", name.replace(":", "-") + ".txt")
        hlo.parent.mkdir(parents=True, exist_ok=True)
        hlo.write_text(r.hlo)
        result = {
            "topology": topology,
            "device_kind": kind,
            "backend": backend,
            "compile_s": time.perf_counter() - started,
            **r.summary(),
        }
        if _COLLECTIVES.value and program == "train_step":
            found = collectives.collectives(r.hlo)
            print(collectives.table(found))
            result["collectives"] = [c._asdict() for c in found]
        yield result


def fit_row(config, result: dict) -> dict:
    """The fit row (launch/tpu_fit.py's rule) of a compiled train step's
    result, for `config` compiled at that batch."""
    chips, batch = result["chips"], result["batch"] // result["chips"]
    spec = batch_file.abstract_batch(
        with_batch(config, chips, batch), tuple(result["canvas"])
    )
    batch_bytes = sum(s.size * s.dtype.itemsize for s in spec.values())
    fixed, per_image = tpu_fit.line(
        result["memory"], batch_bytes // chips, batch
    )
    kind = result["device_kind"]
    best = tpu_fit.largest_batch(fixed, per_image, kind)
    own = config.train.batch_size / chips
    print(
        f"{config_label()} on {kind}: at most {best} images per chip "
        f"(line from batch {batch}/chip: {fixed / 2**30:.2f} GiB + "
        f"{per_image / 2**30:.3f} GiB/image, {tpu_fit.HEADROOM:.0%} of "
        f"{tpu_fit.HBM_GIB[kind]} GiB); the config's batch "
        f"{config.train.batch_size} on {chips} chips is {own:g}/chip: "
        f"{'fits' if own <= best else 'does NOT fit'}"
    )
    return {
        "config": config_label(),
        "device_kind": kind,
        "fixed_bytes": fixed,
        "per_image_bytes": per_image,
        "max_batch_per_chip": best,
        "measured_batch": batch,
        "signature": tpu_fit.signature(config),
        "versions": versions(),
    }


def fit_rows(config, results: list[dict]) -> list[dict]:
    """A fit row per chip kind, from its first train step result."""
    rows = {}
    for result in results:
        kind = result["device_kind"]
        if result["program"] == "train_step" and kind not in rows:
            rows[kind] = fit_row(config, result)
    return list(rows.values())


def save(results: list[dict], rows: list[dict]) -> None:
    """Writes tpu_aot.json under --out."""
    out = pathlib.Path(_OUT.value)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tpu_aot.json").write_text(
        json.dumps(
            {
                "versions": versions(),
                "config": config_label(),
                "results": results,
                "fits": rows,
            },
            indent=2,
        )
    )


def saved_results(path: str) -> list[dict]:
    """The results of a tpu_aot.json of this --config.

    Raises:
      ValueError: naming --fit_from, for another config's file.
    """
    saved = json.loads(pathlib.Path(path).read_text())
    if saved["config"] != config_label():
        raise ValueError(
            f"--fit_from={path}: compiled for {saved['config']}, "
            f"not {config_label()}"
        )
    return saved["results"]


def config_label() -> str:
    spec = config_flags.get_config_filename(flags.FLAGS["config"])
    return pathlib.Path(spec.partition(":")[0]).stem + (
        f":{spec.partition(':')[2]}" if ":" in spec else ""
    )


def write_table(rows: list[dict]) -> None:
    """Replaces the table's rows of the same (config, device_kind)."""
    new = {(r["config"], r["device_kind"]) for r in rows}
    kept = [
        r
        for r in tpu_fit_table.FITS
        if (r["config"], r["device_kind"]) not in new
    ]
    table = sorted(kept + rows, key=lambda r: (r["config"], r["device_kind"]))
    head = _TABLE_FILE.read_text().split('    """\n')[0]
    rows_json = json.dumps(table, indent=2, sort_keys=True)
    _TABLE_FILE.write_text(f'{head}    """\n{rows_json}\n"""\n)\n')
    print(f"wrote {len(rows)} rows to {_TABLE_FILE.relative_to(_REPO)}")


def main(argv) -> None:
    del argv
    config = cli.config_value(_CONFIG)
    print(versions())
    if _CHECK_LIBTPU.value:
        for topology in _TOPOLOGY.value:
            mesh = tpu_compile.topology_mesh(topology)
            kind = tpu_compile.device_kind(mesh)
            print(f"{topology}: {mesh.size} x {kind}")
        return
    results, rows = [], []
    with cli.one_line_errors():
        unknown = set(_PROGRAMS.value) - set(tpu_compile.PROGRAMS)
        if unknown:
            raise ValueError(
                f"--programs: unknown {', '.join(sorted(unknown))}"
            )
        if _FIT_FROM.value:
            results = saved_results(_FIT_FROM.value)
        else:
            for topology in _TOPOLOGY.value:
                for backend in _BACKENDS.value:
                    for result in compile_all(config, topology, backend):
                        results.append(result)
                        save(results, rows)  # what a stopped run finished
        if _FIT.value:
            rows = fit_rows(config, results)
    save(results, rows)
    if _FIT.value and _WRITE_FIT.value:
        write_table(rows)


if __name__ == "__main__":
    app.run(main)
