"""Cross-replica BatchNorm on a data mesh against one device's whole batch.

    python -m tests.helpers.sync_bn_probe --out=FILE [--norm=batch] \
        [--coordinator_address=HOST:PORT --num_processes=2 --process_id=I]

Builds a 'sync_batch' tiny ResNet, FPN and 4conv1fc box head, and computes
a loss over their outputs (the box head's over the valid rois only; every
roi of the last replica is padding) and its gradient twice: inside the
train step's shard_map over every device of every process, each device
holding its rows of the global batch, and on this process's first device
with the whole batch (no mesh: the statistics are the batch's). Process 0
writes both losses and the largest differences of the gradients and of
the updated running statistics as JSON to --out.
"""

import argparse
import json

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import PartitionSpec as P

from detector.modeling import backbone, box_head, fpn, norms

BATCH, IMAGE, ROIS, POOL, CLASSES = 4, 32, 3, 3, 3


class Net(nnx.Module):
    """Backbone -> FPN, and a box head on given pooled features."""

    def __init__(self, norm: str, rngs: nnx.Rngs):
        self.backbone, channels = backbone.build(
            backbone.BackboneOptions("tiny", 8, norm, 4, 0, 1e-5),
            max_level=4,
            dtype=jnp.float32,
            rngs=rngs,
        )
        self.fpn = fpn.FPN(
            channels,
            channels=8,
            min_level=2,
            max_level=4,
            lateral_norm=norms.NormOptions(norm, 4),
            output_norm=norms.NormOptions(norm, 4),
            dtype=jnp.float32,
            rngs=rngs,
        )
        self.box_head = box_head.build(
            box_head.BoxHeadOptions("4conv1fc", 8, POOL, 16, 8, norm, 4),
            CLASSES,
            dtype=jnp.float32,
            rngs=rngs,
        )

    def __call__(self, images, pooled, valid, valid_total):
        """This replica's share of the loss (the replicas' shares sum to
        the whole batch's loss)."""
        loss = 0.0
        for level in self.fpn(self.backbone(images)):
            # sin: a sum of squares of normalised values would hardly
            # depend on which statistics normalised them.
            loss += jnp.sum(jnp.sin(3.0 * level)) / (BATCH * level[0].size)
        logits, deltas = self.box_head(pooled, valid)
        per_roi = jnp.sum(jnp.sin(3.0 * logits), -1) + jnp.sum(
            jnp.sin(30.0 * deltas), (-2, -1)
        )
        return loss + jnp.sum(jnp.where(valid, per_roi, 0.0)) / valid_total


def inputs() -> dict[str, np.ndarray]:
    """The global batch; the last replica's rois are all padding."""
    rng = np.random.default_rng(0)
    valid = np.ones((BATCH, ROIS), bool)
    valid[0, 2] = False
    valid[BATCH // 2 :] = False
    return {
        "images": rng.normal(1.0, 2.0, (BATCH, IMAGE, IMAGE, 3)).astype(
            np.float32
        ),
        "pooled": rng.normal(size=(BATCH, ROIS, POOL, POOL, 8)).astype(
            np.float32
        ),
        "valid": valid,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    # 'batch' (per-device statistics) shows that the comparison can fail.
    parser.add_argument("--norm", default="sync_batch")
    parser.add_argument("--coordinator_address")
    parser.add_argument("--num_processes", type=int, default=1)
    parser.add_argument("--process_id", type=int, default=0)
    args = parser.parse_args()
    if args.num_processes > 1:
        jax.distributed.initialize(
            args.coordinator_address, args.num_processes, args.process_id
        )
    from detector.distributed import sharding  # after the job has started

    model = Net(args.norm, nnx.Rngs(0))
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    batch = inputs()
    valid_total = float(batch["valid"].sum())

    def loss_and_grads(params, rest, images, pooled, valid):
        def loss_fn(params, rest):
            net = nnx.merge(graphdef, params, rest, copy=True)
            loss = net(images, pooled, valid, valid_total)
            return loss, nnx.state(net, nnx.BatchStat)

        (loss, stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            params, rest
        )
        return loss, grads, stats

    def on_mesh(params, rest, images, pooled, valid):
        loss, grads, stats = loss_and_grads(params, rest, images, pooled, valid)
        loss, grads = jax.lax.psum((loss, grads), "data")
        return loss, grads, stats

    mesh = sharding.make_mesh()
    rows = BATCH // jax.process_count()
    first = jax.process_index() * rows
    local = {k: v[first : first + rows] for k, v in batch.items()}
    sharded = sharding.put_batch(local, mesh, keys=tuple(batch))
    replicated = sharding.replicate((params, rest), mesh)
    got = jax.jit(
        jax.shard_map(
            on_mesh,
            mesh=mesh,
            in_specs=(P(), P(), P("data"), P("data"), P("data")),
            out_specs=(P(), P(), P()),
            check_vma=False,
        )
    )(*replicated, sharded["images"], sharded["pooled"], sharded["valid"])
    # Replicated outputs: this process's copy.
    got = jax.tree.map(lambda x: np.asarray(x.addressable_data(0)), got)
    on_one_device = jax.device_put(
        (params, rest, batch["images"], batch["pooled"], batch["valid"]),
        jax.local_devices()[0],
    )
    want = jax.jit(loss_and_grads)(*on_one_device)
    want = jax.tree.map(np.asarray, jax.device_get(want))

    def largest(a, b):
        """Largest |a - b| / (1 + |b|) over the leaves."""
        return max(
            float(np.max(np.abs(x - y) / (1.0 + np.abs(y))))
            for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
        )

    stats = nnx.to_flat_state(got[2])
    head_mean = next(
        np.asarray(v) for k, v in stats if "box_head" in k and "mean" in k
    )
    result = {
        "devices": jax.device_count(),
        "processes": jax.process_count(),
        "loss": float(got[0]),
        "reference_loss": float(want[0]),
        "grads": largest(got[1], want[1]),
        "statistics": largest(got[2], want[2]),
        "statistics_finite": all(
            np.isfinite(x).all() for x in jax.tree.leaves(got[2])
        ),
        "head_mean_moved": float(np.abs(head_mean).max()),
    }
    if jax.process_index() == 0:
        with open(args.out, "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main()
