"""The training state: model variables split once into a static graphdef,
trainable params and the rest, so the jitted step is a pure function of
(TrainState, batch, key)."""

import json
import pathlib
from typing import Any

import flax
import jax
import jax.numpy as jnp
import ml_collections
import optax
from absl import logging
from flax import nnx, serialization
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from detector import factory
from detector.config import config_diff
from detector.distributed import sharding
from detector.inference import detect
from detector.modeling import model as model_lib
from detector.state import checkpoint, warm_start


@flax.struct.dataclass
class TrainState:
    step: jax.Array  # int32 scalar
    params: nnx.State
    rest: nnx.State
    opt_state: optax.OptState


def build_model(
    config: ml_collections.ConfigDict, seed: int
) -> model_lib.MaskRCNN:
    """The model of `config` in train mode, initialised from `seed`."""
    model = factory.build_model(config, rngs=nnx.Rngs(seed))
    model.train()
    return model


def abstract_model(
    config: ml_collections.ConfigDict, seed: int
) -> tuple[nnx.GraphDef, nnx.State, nnx.State]:
    """(graphdef, params, rest) of `config`'s train-mode model as shapes
    only: nothing is initialised or compiled."""
    return nnx.split(
        nnx.eval_shape(lambda: build_model(config, seed)), nnx.Param, ...
    )


def create_model(
    config: ml_collections.ConfigDict, seed: int
) -> tuple[nnx.GraphDef, nnx.State, nnx.State]:
    """Builds the model and splits it into (graphdef, params, rest).

    The initialisers run as one jitted program compiled without backend
    optimisation: building the model eagerly compiles one small program per
    parameter shape, which takes several times longer on CPU. The model is
    built once, in that program's trace, which also gives the graphdef.
    """
    graphdefs = []

    def init():
        graphdef, params, rest = nnx.split(
            build_model(config, seed), nnx.Param, ...
        )
        graphdefs.append(graphdef)  # static: no tracer leaves the trace
        return params, rest

    params, rest = (
        jax.jit(init)
        .lower()
        .compile(compiler_options={"xla_backend_optimization_level": 0})()
    )
    (graphdef,) = graphdefs
    return graphdef, params, rest


def init_state(
    params: nnx.State, rest: nnx.State, tx: optax.GradientTransformation
) -> TrainState:
    return TrainState(
        step=jnp.zeros((), jnp.int32),
        params=params,
        rest=rest,
        opt_state=tx.init(params),
    )


def eval_graphdef(
    graphdef: nnx.GraphDef, params: nnx.State, rest: nnx.State
) -> nnx.GraphDef:
    """The graphdef of the same model in eval mode (running BN stats)."""
    model = nnx.merge(graphdef, params, rest)
    model.eval()
    return nnx.split(model, nnx.Param, ...)[0]


def _is_state(x: Any) -> bool:
    return isinstance(x, nnx.State)


def to_tree(state: TrainState) -> dict:
    """Nested dicts of arrays (what checkpoints hold)."""
    pure = jax.tree.map(
        lambda s: nnx.to_pure_dict(s) if _is_state(s) else s,
        state,
        is_leaf=_is_state,
    )
    return {
        "step": pure.step,
        "params": pure.params,
        "rest": pure.rest,
        "opt_state": serialization.to_state_dict(pure.opt_state),
    }


def from_tree(template: TrainState, tree: dict) -> TrainState:
    """Inverse of to_tree, shaped like `template`."""

    def fill(t, p):
        if not _is_state(t):
            return p
        state = jax.tree.map(lambda x: x, t)  # a copy to fill in
        nnx.replace_by_pure_dict(state, p)
        return state

    pure_template = jax.tree.map(
        lambda s: nnx.to_pure_dict(s) if _is_state(s) else s,
        template.opt_state,
        is_leaf=_is_state,
    )
    opt_state = serialization.from_state_dict(pure_template, tree["opt_state"])
    return TrainState(
        step=tree["step"],
        params=fill(template.params, tree["params"]),
        rest=fill(template.rest, tree["rest"]),
        opt_state=jax.tree.map(
            fill, template.opt_state, opt_state, is_leaf=_is_state
        ),
    )


def restore_or_init(
    config: ml_collections.ConfigDict,
    mesh: Mesh,
    ckpt: checkpoint.Checkpointer,
    tx: optax.GradientTransformation,
) -> tuple[nnx.GraphDef, TrainState]:
    """(graphdef, state) of training: the newest intact checkpoint, else a
    fresh model (warm-started from model.backbone_init or
    model.init_checkpoint); the restore is logged as `Resumed from
    <checkpoints>/<step>`.

    A checkpoint is restored into the state's shapes: the initialisers
    neither compile nor run (seconds of a resume or an evaluation on CPU).

    Raises:
      ValueError: the checkpoints were written by a different config, or
        every one is damaged.
    """
    resuming = ckpt.latest_step() is not None
    if resuming:  # restored into shapes: no initialiser runs
        graphdef, params, rest = abstract_model(config, config.seed)
        template = jax.eval_shape(
            lambda p, r: init_state(p, r, tx), params, rest
        )
        restored = _restore_tree(config, ckpt, to_tree(template), mesh)
        if restored is not None:
            return graphdef, from_tree(template, restored)
    graphdef, params, rest = create_model(config, config.seed)
    if not resuming:  # a resumed run keeps its own weights
        params, rest = warm_start.apply(config, params, rest)
    return graphdef, sharding.replicate(init_state(params, rest, tx), mesh)


def _restore_tree(
    config: ml_collections.ConfigDict,
    ckpt: checkpoint.Checkpointer,
    template: dict,
    mesh: Mesh,
    step: int | None = None,
    read_only: bool = False,
) -> dict | None:
    """The parts of `template` (a tree of shapes) read from the newest
    intact checkpoint (damaged ones are logged and skipped), or from
    `step`'s, replicated on `mesh`; None where none is kept. Logged as
    `Resumed from <checkpoints>/<step>`, or `read_only` (eval.py,
    export.py, predict.py) `Restored <checkpoints>/<step> (step N)`."""
    replicated = NamedSharding(mesh, P())
    abstract = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=replicated),
        template,
    )
    try:
        restored = (
            ckpt.restore_latest(abstract)
            if step is None
            else (step, _restore_step(ckpt, abstract, step))
        )
    except checkpoint.ConfigMismatchError as e:
        saved = ckpt.directory.parent / "config.json"
        raise checkpoint.ConfigMismatchError(
            f"{e}{_differences(config, saved)}"
        ) from None
    if restored is None:
        return None
    step, tree = restored
    if read_only:
        logging.info("Restored %s/%d (step %d)", ckpt.directory, step, step)
    else:
        logging.info("Resumed from %s/%d", ckpt.directory, step)
    return tree


def _restore_step(
    ckpt: checkpoint.Checkpointer, abstract: dict, step: int
) -> dict:
    """The tree of checkpoint `step`; a damaged one is a ValueError."""
    try:
        return ckpt.restore(abstract, step)
    except checkpoint.DamagedCheckpointError as e:
        raise ValueError(f"{ckpt.directory}/{step} is damaged: {e}") from None


def kept_steps(workdir: pathlib.Path) -> list[int]:
    """The steps of the checkpoints kept in `workdir`, oldest first;
    reads only."""
    ckpt = checkpoint.Checkpointer(
        pathlib.Path(workdir) / "checkpoints", max_to_keep=1, create=False
    )
    try:
        return ckpt.steps()
    finally:
        ckpt.close()


# Changed fields named in a config mismatch error; the rest are counted.
_MAX_NAMED_CHANGES = 8


def _differences(config: ml_collections.ConfigDict, saved: pathlib.Path) -> str:
    """'; the config differs from <saved> in: field old -> new, ...' (the
    run's config.json beside the checkpoints), or '' where none is
    readable."""
    try:
        stored = json.loads(saved.read_text())
    except (OSError, ValueError):
        return ""
    found = config_diff.changes(
        stored, json.loads(config.to_json_best_effort())
    )
    if not found:
        return f"; {saved} holds this same config (another version's model?)"
    more = len(found) - _MAX_NAMED_CHANGES
    listed = ", ".join(found[:_MAX_NAMED_CHANGES])
    return (
        f"; this config differs from {saved} in {len(found)} field(s): "
        f"{listed}{f' and {more} more' if more > 0 else ''}"
    )


def _check_restorable(
    config: ml_collections.ConfigDict,
    ckpt: checkpoint.Checkpointer,
    ckpt_dir: pathlib.Path,
) -> None:
    if ckpt.latest_step() is None and not config.model.init_checkpoint:
        raise FileNotFoundError(
            f"{ckpt_dir}: no checkpoint to evaluate "
            "(train first, or check --workdir)"
        )


def check_restorable(
    config: ml_collections.ConfigDict, workdir: pathlib.Path
) -> None:
    """Raises restore_weights' FileNotFoundError, without reading any
    checkpoint: a quick check before slower ones."""
    ckpt_dir = pathlib.Path(workdir) / "checkpoints"
    ckpt = checkpoint.Checkpointer(ckpt_dir, max_to_keep=1, create=False)
    try:
        _check_restorable(config, ckpt, ckpt_dir)
    finally:
        ckpt.close()


def restore_weights(
    config: ml_collections.ConfigDict,
    workdir: pathlib.Path,
    mesh: Mesh,
    step: int | None = None,
) -> detect.Weights:
    """The weights (params and norm statistics, never the optimizer state)
    of the newest intact checkpoint of `workdir` (or of `step`, one of
    `kept_steps`), replicated on `mesh`, with an eval-mode graphdef; reads
    only (creates nothing). A workdir without checkpoints gives the model
    `model.init_checkpoint` starts from, where one is set (a torchvision
    Mask R-CNN file, say).

    Raises:
      FileNotFoundError: `workdir` has no checkpoint and the config no
        `model.init_checkpoint`.
      ValueError: every checkpoint (or `step`'s) is damaged, or was
        written by another config.
    """
    ckpt_dir = pathlib.Path(workdir) / "checkpoints"
    ckpt = checkpoint.Checkpointer(ckpt_dir, max_to_keep=1, create=False)
    try:
        _check_restorable(config, ckpt, ckpt_dir)
        graphdef, params, rest = abstract_model(config, config.seed)
        template = {
            "step": jax.ShapeDtypeStruct((), jnp.int32),
            "params": nnx.to_pure_dict(params),
            "rest": nnx.to_pure_dict(rest),
        }
        tree = None
        if ckpt.latest_step() is not None:
            tree = _restore_tree(config, ckpt, template, mesh, step, True)
    finally:
        ckpt.close()
    if tree is None:
        logging.info(
            "%s: no checkpoint; using the model started from "
            "model.init_checkpoint=%s",
            ckpt_dir,
            config.model.init_checkpoint,
        )
        graphdef, params, rest = create_model(config, config.seed)
        params, rest = sharding.replicate(
            warm_start.apply(config, params, rest), mesh
        )
        step, source = 0, config.model.init_checkpoint
    else:
        nnx.replace_by_pure_dict(params, tree["params"])
        nnx.replace_by_pure_dict(rest, tree["rest"])
        step = int(jax.device_get(tree["step"]))
        source = str(ckpt_dir.absolute() / str(step))
    return detect.Weights(
        eval_graphdef(graphdef, params, rest), params, rest, step, source
    )
