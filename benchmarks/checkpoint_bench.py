"""What the content checksums add to a checkpoint save, and to a restore.

    python benchmarks/checkpoint_bench.py [--config=configs/shapes.py] \
        [--reps 5]

Builds the training-state tree of a config (params, BatchNorm values and
optimizer slots, random values of the real shapes) and times, as medians
over `--reps` after one warm-up each:
- `checksum_ms`: `checkpoint.content_checksums` alone (one device program,
  fetched to the host; NumPy on the arrays in place on CPU);
- `save_call_ms`: the blocking part of `Checkpointer.save` (checksums plus
  orbax's device-to-host copy; the write to disk is asynchronous);
- `orbax_save_call_ms`: the same save without checksums (orbax only);
- `save_to_disk_ms`: `Checkpointer.save` then `wait()`, the whole save;
- `restore_ms`: `Checkpointer.restore` with its checksum and finiteness
  verification, and `verify_ms`: that verification alone.
Prints one JSON object (also written to --out).
"""

import json
import pathlib
import shutil
import sys
import tempfile
import time

_REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(_REPO))

import jax  # noqa: E402
import numpy as np  # noqa: E402
import orbax.checkpoint as ocp  # noqa: E402
from absl import app, flags  # noqa: E402
from flax import nnx  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from detector import factory  # noqa: E402
from detector.launch import cli, validate  # noqa: E402
from detector.state import checkpoint, optimizer  # noqa: E402
from detector.state import train_state as state_lib  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file(
    "config",
    str(_REPO / "configs" / "shapes.py"),
    "Config whose state to save.",
)
_REPS = flags.DEFINE_integer("reps", 5, "Timed repetitions per quantity.")
_OUT = flags.DEFINE_string(
    "out", "benchmarks/out/checkpoint_bench.json", "Output JSON."
)


def state_tree(config) -> dict:
    """The checkpointed tree of `config`'s train state, random values."""
    tx, _ = optimizer.make_optimizer(config)

    def build():
        model = factory.build_model(config, rngs=nnx.Rngs(0))
        _, params, rest = nnx.split(model, nnx.Param, ...)
        return state_lib.to_tree(state_lib.init_state(params, rest, tx))

    shapes = jax.eval_shape(build)
    leaves, treedef = jax.tree.flatten(shapes)
    rng = np.random.default_rng(0)
    arrays = [
        jax.device_put(
            rng.standard_normal(s.shape).astype(s.dtype)
            if np.issubdtype(s.dtype, np.floating)
            else np.zeros(s.shape, s.dtype)
        )
        for s in leaves
    ]
    return jax.tree.unflatten(treedef, arrays)


def median_ms(fn, reps: int, before=lambda: None) -> float:
    """Median wall time of fn() in ms; `before()` runs untimed each time."""
    before()
    fn()  # warm-up (compiles)
    times = []
    for _ in range(reps):
        before()
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1e3)
    return float(np.median(times))


def main(argv: list[str]) -> None:
    del argv
    config = cli.config_value(_CONFIG)
    with cli.one_line_errors():
        validate.validate(config)
    tree = state_tree(config)
    reps = _REPS.value
    work = pathlib.Path(tempfile.mkdtemp())
    ckpt = checkpoint.Checkpointer(work / "ours", max_to_keep=2)
    plain = ocp.CheckpointManager(
        work / "plain",
        options=ocp.CheckpointManagerOptions(max_to_keep=2),
        item_handlers=ocp.StandardCheckpointHandler(),
    )
    steps = iter(range(1, 10_000))

    def save_call():
        ckpt.save(next(steps), tree)

    def orbax_save_call():
        plain.save(next(steps), args=ocp.args.StandardSave(tree))

    def save_to_disk():
        save_call()
        ckpt.wait()

    results = {
        "device": jax.devices()[0].device_kind,
        "arrays": len(jax.tree.leaves(tree)),
        "mbytes": sum(x.nbytes for x in jax.tree.leaves(tree)) / 2**20,
        "checksum_ms": median_ms(
            lambda: checkpoint.content_checksums(tree), reps
        ),
        # The previous save's write finishes untimed first.
        "save_call_ms": median_ms(save_call, reps, before=ckpt.wait),
    }
    ckpt.wait()
    results["orbax_save_call_ms"] = median_ms(
        orbax_save_call, reps, before=plain.wait_until_finished
    )
    plain.wait_until_finished()
    results["save_to_disk_ms"] = median_ms(save_to_disk, reps)
    abstract = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding),
        tree,
    )
    restored = ckpt.restore(abstract)
    results["restore_ms"] = median_ms(lambda: ckpt.restore(abstract), reps)
    results["verify_ms"] = median_ms(
        lambda: ckpt.verify(restored, ckpt.latest_step()), reps
    )
    ckpt.close()
    plain.close()
    shutil.rmtree(work)
    print(json.dumps(results, indent=2))
    out = pathlib.Path(_OUT.value)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    app.run(main)
