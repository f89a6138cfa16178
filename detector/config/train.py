"""config.train: batch, optimizer, schedule, logging and checkpoints."""

import ml_collections

from detector.config.checks import check_minimums

# Integer fields that must be at least this value: (key, minimum, meaning).
_MINIMUMS = (
    ("train.batch_size", 1, "images per step"),
    ("train.num_steps", 1, "steps to train"),
    ("train.log_every", 1, "steps between metrics lines"),
    ("train.checkpoint_every", 1, "steps between checkpoints"),
    ("train.keep_checkpoints", 1, "checkpoints kept"),
    ("train.eval_every", 0, "steps between evaluations, 0: only at the end"),
)


def defaults() -> ml_collections.ConfigDict:
    """config.train: batch, optimizer, schedule, logging and checkpoints."""
    train = ml_collections.ConfigDict()
    train.batch_size = 64  # global, across all devices and hosts
    train.num_steps = 22500
    train.optimizer = "sgd"  # 'sgd' (momentum) | 'adamw'
    train.learning_rate = 0.12
    train.momentum = 0.9
    train.weight_decay = 4e-5
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
    return train


def validate(config: ml_collections.ConfigDict) -> None:
    """Raises ValueError (one line naming the key) on a bad train section."""
    check_minimums(config, _MINIMUMS)
