"""ProfileWindow: a trace of the configured steps, or none."""

import jax
import jax.numpy as jnp
import pytest

from detector import config as config_lib
from detector.config import train as config_train
from detector.engine import profile_window


def _run(window, steps):
    for step in steps:
        window.before(step)
        window.after(step, jnp.ones(2) * step)


def test_the_window_writes_a_trace_of_its_steps(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(
        jax.profiler, "start_trace", lambda d: calls.append(("start", d))
    )
    monkeypatch.setattr(
        jax.profiler, "stop_trace", lambda: calls.append(("stop",))
    )
    _run(profile_window.ProfileWindow((3, 4), tmp_path, 0), range(1, 7))
    assert calls == [("start", str(tmp_path / "profile")), ("stop",)]
    calls.clear()
    # Resumed after step 3: traces step 4 alone; after step 4: nothing.
    _run(profile_window.ProfileWindow((3, 4), tmp_path, 3), range(4, 7))
    assert calls == [("start", str(tmp_path / "profile")), ("stop",)]
    calls.clear()
    _run(profile_window.ProfileWindow((3, 4), tmp_path, 4), range(5, 7))
    _run(profile_window.ProfileWindow((), tmp_path, 0), range(1, 7))
    assert calls == []


def test_a_real_trace_lands_in_the_workdir(tmp_path):
    window = profile_window.ProfileWindow((1, 2), tmp_path, 0)
    _run(window, (1, 2))
    assert list((tmp_path / "profile").rglob("*.xplane.pb"))


@pytest.mark.parametrize(
    "steps", [(3, 2), (1, 2, 3), (0, 2), (1.5, 2), (1, 10**6), (5,)]
)
def test_a_bad_profile_window_is_one_line_naming_the_field(steps):
    config = config_lib.base_config()
    config.train.profile_steps = steps
    with pytest.raises(ValueError, match=r"^config\.train\.profile_steps="):
        config_train.validate(config)
    config.train.profile_steps = (2, 3)
    config_train.validate(config)  # a good one passes
