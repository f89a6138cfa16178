"""Config files loaded for --config: whatever a file does wrong is one line
naming the file (and the line), never a traceback."""

import os
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
            "--config: configs/missing.py: No such file or directory; the "
            "project's configs: configs/coco_r50_fpn.py, "
            "configs/coco_r50_fpn_lsj.py, configs/shapes.py, "
            "configs/small_coco.py",
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


def test_an_empty_config_dict_names_the_missing_sections(tmp_path):
    line = _load_error(
        tmp_path,
        "import ml_collections\n\n\ndef get_config():\n"
        "    return ml_collections.ConfigDict()\n",
    )
    assert line == (
        f"--config: {tmp_path}/my_config.py: get_config()'s config: missing "
        "section(s) data, eval, model, train and field(s) seed; every field "
        "of detector.config.base_config() must be there (start from "
        "base_config(); --print_config writes a complete JSON config)"
    )


def test_a_python_config_missing_a_field_names_it(tmp_path):
    line = _load_error(
        tmp_path,
        "from detector import config\n\n\ndef get_config():\n"
        "    c = config.base_config()\n    del c.train['num_steps']\n"
        "    return c\n",
    )
    assert line.startswith(
        f"--config: {tmp_path}/my_config.py: get_config()'s config: missing "
        "field(s) train.num_steps; "
    )


@pytest.mark.parametrize("code", ["0", "'bye'"])
def test_a_config_file_that_exits_says_so(tmp_path, code):
    line = _load_error(
        tmp_path, f"import sys\n\n\ndef get_config():\n    sys.exit({code})\n"
    )
    assert line == (
        f"--config: {tmp_path}/my_config.py, line 5: the config file called "
        f"sys.exit({code}) instead of returning its config; a config file's "
        "get_config() must return an ml_collections.ConfigDict"
    )


def test_a_fifo_config_file_is_not_a_regular_file(tmp_path):
    os.mkfifo(tmp_path / "fifo.py")
    parser = config_file.ConfigFileParser("config")
    with pytest.raises(config_file.ConfigFileError) as info:
        parser.parse(str(tmp_path / "fifo.py"))
    assert str(info.value) == (
        f"--config: {tmp_path}/fifo.py: not a regular file (a FIFO)"
    )


def test_a_config_file_under_home_is_found(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "mine.py").write_text(
        "from detector import config\n\n\ndef get_config():\n"
        "    return config.base_config()\n"
    )
    config = config_file.ConfigFileParser("config").parse("~/mine.py")
    assert config.train.num_steps > 0


def test_a_damaged_workdir_config_json_is_named(tmp_path):
    from detector.launch import run_config

    (tmp_path / "config.json").write_text('{"train": {')
    parser = config_file.ConfigFileParser("config")
    with pytest.raises(config_file.ConfigFileError) as info:
        parser.parse(run_config.json_config_spec(str(tmp_path / "config.json")))
    assert str(info.value).startswith(
        f"{tmp_path}/config.json: not readable JSON (line 1 column 12"
    )
