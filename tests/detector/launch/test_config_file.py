"""Config files loaded for --config: whatever a file does wrong is one line
naming the file (and the line), never a traceback."""

import pathlib

import pytest

from detector.launch import config_file

ROOT = pathlib.Path(__file__).resolve().parents[3]


def _load_error(tmp_path: pathlib.Path, source: str, spec: str = "") -> str:
    path = tmp_path / "my_config.py"
    path.write_text(source)
    parser = config_file.ConfigFileParser("config")
    with pytest.raises(config_file.ConfigFileError) as info:
        parser.parse(str(path) + spec)
    assert "\n" not in str(info.value)
    return str(info.value)


@pytest.mark.parametrize(
    "returned, named",
    [("{'train': 1}", "a dict"), ("None", "None"), ("3", "an int")],
)
def test_get_config_returning_no_config_dict_is_one_line(
    tmp_path, returned, named
):
    line = _load_error(
        tmp_path, f"def get_config(arg=None):\n    return {returned}\n"
    )
    assert line == (
        f"--config: {tmp_path}/my_config.py: get_config() returned {named}, "
        "not an ml_collections.ConfigDict"
    )


def test_config_file_that_raises_names_file_line_and_error(tmp_path):
    line = _load_error(
        tmp_path,
        "import math\n\n\ndef get_config():\n    x = 1\n"
        "    raise RuntimeError('boom')\n",
    )
    assert line == (
        f"--config: {tmp_path}/my_config.py, line 6: RuntimeError: boom"
    )


def test_config_file_with_a_syntax_error_names_file_and_line(tmp_path):
    line = _load_error(tmp_path, "x = 1\ndef get_config(:\n    return 1\n")
    assert line.startswith(
        f"--config: {tmp_path}/my_config.py, line 2: SyntaxError: "
    )


def test_config_file_raising_at_import_names_its_line(tmp_path):
    line = _load_error(tmp_path, "import no_such_module_here\n")
    assert line == (
        f"--config: {tmp_path}/my_config.py, line 1: ModuleNotFoundError: "
        "No module named 'no_such_module_here'"
    )


def test_config_file_without_get_config(tmp_path):
    line = _load_error(tmp_path, "x = 1\n")
    assert line == (
        f"--config: {tmp_path}/my_config.py: defines no get_config()"
    )


@pytest.mark.parametrize(
    "spec, line",
    [
        (  # the file's own ValueError, which names it: passed on as it is
            "configs/shapes.py:huge",
            "configs/shapes.py: unknown variant 'huge'; known: runlocal",
        ),
        (
            "configs/missing.py",
            "--config: configs/missing.py: No such file or directory",
        ),
        ("configs", "--config: configs: Is a directory"),
    ],
)
def test_config_file_errors_of_the_command_line(spec, line):
    parser = config_file.ConfigFileParser("config")
    with pytest.raises(config_file.ConfigFileError) as info:
        parser.parse(spec)
    assert str(info.value) == line


def test_a_good_config_file_loads_locked():
    config = config_file.ConfigFileParser("config").parse(
        "configs/shapes.py:runlocal"
    )
    assert config.train.num_steps > 0
    with pytest.raises(AttributeError):
        config.train.no_such_field = 1
