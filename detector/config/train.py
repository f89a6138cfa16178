"""config.train: batch, optimizer, schedule, logging and checkpoints."""

import ml_collections

from detector.config import ranges

# Every numeric field's range (detector/config/ranges.py).
RANGES: ranges.Table = {
    "train.batch_size": ranges.between(1, 4096, "images per step"),
    "train.num_steps": ranges.between(
        1, 2**31 - 1, "steps to train; the step counter is int32"
    ),
    "train.learning_rate": ranges.above(0, "the peak learning rate"),
    "train.momentum": ranges.between(0, 1, high_open=True),
    "train.weight_decay": ranges.at_least(0),
    "train.warmup_steps": ranges.at_least(0, "steps of linear warmup"),
    "train.warmup_init_factor": ranges.between(
        0, 1, "the warmup's first learning rate, as a fraction"
    ),
    "train.step_boundaries": ranges.each(
        ranges.at_least(1), ordered=True, shape="steps"
    ),
    "train.step_fractions": ranges.each(
        ranges.between(0, 1, low_open=True, high_open=True),
        ordered=True,
        shape="fractions of num_steps",
    ),
    "train.step_factor": ranges.above(0, "learning rate factor per step"),
    "train.grad_clip_norm": ranges.at_least(0, "0 turns clipping off"),
    "train.log_every": ranges.at_least(1, "steps between metrics lines"),
    "train.checkpoint_every": ranges.at_least(1, "steps between checkpoints"),
    "train.keep_checkpoints": ranges.between(
        1, 1000, "checkpoints kept, each the model's size on disk"
    ),
    "train.eval_every": ranges.at_least(
        0, "steps between evaluations, 0: only at the end"
    ),
    "train.profile_steps": ranges.each(
        ranges.at_least(1, "steps"), ordered=True, shape="(first, last)"
    ),
}


def defaults() -> ml_collections.ConfigDict:
    """config.train: batch, optimizer, schedule, logging and checkpoints."""
    train = ml_collections.ConfigDict()
    train.batch_size = 64  # global, across all devices and hosts
    train.num_steps = 22500
    train.optimizer = "sgd"  # 'sgd' (momentum) | 'adamw'
    train.learning_rate = 0.12
    train.momentum = 0.9
    train.weight_decay = 4e-5
    # Which params it reaches (state/optimizer.DECAY_MASKS): 'kernels'
    # (not biases and norm scales; detectron2 decays biases too) or 'all'
    # (torchvision's reference scripts).
    train.weight_decay_on = "kernels"
    train.schedule = "step"  # 'step' | 'cosine'
    train.warmup_steps = 500
    train.warmup_init_factor = 0.0067
    train.step_boundaries = (15000, 20000)
    # The same boundaries as fractions of num_steps, e.g. (2/3, 8/9); used
    # instead of step_boundaries (which must then be empty) when set.
    train.step_fractions = ()
    train.step_factor = 0.1
    train.grad_clip_norm = 0.0  # 0 turns clipping off
    train.log_every = 100
    train.checkpoint_every = 1000
    train.keep_checkpoints = 3
    train.eval_every = 0  # 0: evaluate only at the end
    # Deterministic GPU reductions (XLA --xla_gpu_deterministic_ops): the
    # same run twice gives the same losses, at a cost in step time
    # (benchmarks/README.md, "GPU results"). Applied by the entry points
    # before JAX starts a backend (detector/distributed/determinism.py); no
    # effect on CPU and TPU.
    train.deterministic = False
    # (first, last): a jax.profiler trace of those steps into
    # <workdir>/profile (docs/training.md); () traces nothing.
    train.profile_steps = ()
    return train


def validate(config: ml_collections.ConfigDict) -> None:
    """Raises ValueError (one line naming the key) on a bad train section."""
    ranges.check(config, "train", RANGES, defaults())
    _check_profile_steps(config.train)


def _check_profile_steps(train: ml_collections.ConfigDict) -> None:
    """profile_steps is () or (first, last), integer steps of the run."""
    steps = tuple(train.profile_steps)
    if not steps:
        return
    if (
        len(steps) != 2
        or not all(type(s) is int for s in steps)
        or steps[1] > train.num_steps
    ):
        raise ValueError(
            f"config.train.profile_steps={steps!r}: must be () or (first, "
            f"last), integer steps with 1 <= first <= last <= "
            f"train.num_steps={train.num_steps}"
        )
