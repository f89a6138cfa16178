"""compile_cache: where JAX's persistent compilation cache lives, how it is
moved or turned off, and one line for an entry it cannot use."""

import logging as std_logging
import pathlib

import jax
import pytest
from absl import logging

from detector.utils import compile_cache


@pytest.fixture
def jax_cache_config():
    """The session's cache settings (tests/conftest.py), restored after."""
    names = (
        "jax_compilation_cache_dir",
        "jax_enable_compilation_cache",
        "jax_persistent_cache_min_compile_time_secs",
    )
    saved = {name: getattr(jax.config, name) for name in names}
    yield
    for name, value in saved.items():
        jax.config.update(name, value)


def test_the_folder_follows_xdg_and_the_variable_moves_or_turns_it_off(
    tmp_path, jax_cache_config
):
    jax.config.update("jax_compilation_cache_dir", None)
    home = pathlib.Path("~/.cache").expanduser()
    assert compile_cache.chosen_folder({}) == home / "flax-maskrcnn" / "jax"
    env = {"XDG_CACHE_HOME": str(tmp_path)}
    assert compile_cache.chosen_folder(env) == tmp_path / "flax-maskrcnn/jax"
    moved = {**env, compile_cache.ENV: str(tmp_path / "mine")}
    assert compile_cache.chosen_folder(moved) == tmp_path / "mine"
    for off in ("off", "OFF", "0", "false"):
        assert compile_cache.chosen_folder({compile_cache.ENV: off}) is None


def test_a_folder_set_for_jax_is_kept_unless_the_variable_says_otherwise(
    tmp_path, jax_cache_config
):
    jax.config.update("jax_compilation_cache_dir", "/jax/own")
    assert compile_cache.chosen_folder({}) == pathlib.Path("/jax/own")
    moved = {compile_cache.ENV: str(tmp_path)}
    assert compile_cache.chosen_folder(moved) == tmp_path


def test_enable_points_jax_at_the_folder_or_turns_the_cache_off(
    tmp_path, jax_cache_config
):
    folder = tmp_path / "cache"
    assert compile_cache.enable({compile_cache.ENV: str(folder)}) == folder
    assert folder.is_dir()
    assert jax.config.jax_compilation_cache_dir == str(folder)
    assert jax.config.jax_enable_compilation_cache
    assert jax.config.jax_persistent_cache_min_compile_time_secs == 0.0
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    compile_cache.enable(
        {compile_cache.ENV: str(folder), compile_cache.MIN_COMPILE_ENV: "0.5"}
    )  # JAX's own variable, set: kept
    assert jax.config.jax_persistent_cache_min_compile_time_secs == 0.5
    assert compile_cache.enable({compile_cache.ENV: "off"}) is None
    assert not jax.config.jax_enable_compilation_cache


def test_a_folder_that_cannot_be_made_turns_the_cache_off_in_one_line(
    tmp_path, jax_cache_config, monkeypatch
):
    blocker = tmp_path / "file"
    blocker.write_text("")
    lines = []
    monkeypatch.setattr(
        logging, "warning", lambda text, *args: lines.append(text % args)
    )
    env = {compile_cache.ENV: str(blocker / "cache")}
    assert compile_cache.enable(env) is None
    assert not jax.config.jax_enable_compilation_cache
    assert len(lines) == 1 and str(blocker / "cache") in lines[0], lines


def test_unusable_entries_are_one_line_for_the_whole_process(monkeypatch):
    lines, other = [], []
    monkeypatch.setattr(
        logging, "warning", lambda text, *args: lines.append(text % args)
    )
    monkeypatch.setattr(compile_cache, "_warned", False)
    show = compile_cache.one_line_entry_warnings(
        lambda message, *args: other.append(str(message))
    )
    for name in ("jit_a", "jit_b"):
        show(
            UserWarning(
                "Error reading persistent compilation cache entry for "
                f"'{name}': ZstdError: could not decompress"
            ),
            UserWarning,
            "compiler.py",
            1,
        )
    show(UserWarning("something else"), UserWarning, "x.py", 1)
    assert len(lines) == 1 and "ZstdError" in lines[0], lines
    assert other == ["something else"]


def test_the_index_says_before_a_compile_whether_its_programs_are_kept(
    tmp_path, jax_cache_config
):
    """Only the entries a run of the same key loaded or wrote, each of its
    size, make `cached`; another key, a missing or a cut entry does not."""
    folder = tmp_path / "cache"
    compile_cache.enable({compile_cache.ENV: str(folder)})
    assert compile_cache.kept_note({compile_cache.ENV: str(folder)}) == ""
    (folder / "jit_old-99-cache").write_bytes(b"another run's")
    first = compile_cache.ProgramIndex("config a")
    assert not first.cached
    jax_log = std_logging.getLogger("jax._src.compiler")
    with first.watching():  # as JAX logs a hit and a miss it then writes
        jax_log.debug(
            "Persistent compilation cache hit for '%s' with key %r",
            "jit_old",
            "jit_old-99",
        )
        jax_log.debug(
            "PERSISTENT COMPILATION CACHE MISS for '%s' with key %r",
            "jit_step",
            "jit_step-1234",
        )
        (folder / "jit_step-1234-cache").write_bytes(b"program")
    assert jax_log.level == std_logging.NOTSET  # as it was
    first.record()
    again = compile_cache.ProgramIndex("config a")
    assert again.cached
    assert not compile_cache.ProgramIndex("config b").cached
    assert compile_cache.kept_note({compile_cache.ENV: str(folder)}) == (
        f"; 2 programs compiled before are kept in the compilation cache "
        f"({folder})"
    )
    (folder / "jit_old-99-cache").write_bytes(b"cut")  # cut short
    assert not compile_cache.ProgramIndex("config a").cached
    (folder / "jit_old-99-cache").unlink()
    assert not compile_cache.ProgramIndex("config a").cached
