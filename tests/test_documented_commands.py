"""Every command README.md, docs/ and the entry points' --help texts show
names flags its entry point defines, config fields and files that exist,
and categories the model it runs knows (the default shapes model unless
it names another config)."""

import ast
import functools
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

from detector.data import shapes_writer

ROOT = pathlib.Path(__file__).resolve().parents[1]
ENTRY_POINTS = ("train.py", "eval.py", "export.py", "predict.py")
_COMMAND = re.compile(rf"python ({'|'.join(map(re.escape, ENTRY_POINTS))})")
# Folders a documented run writes (a workdir's config.json).
_RUN_FOLDERS = ("workdirs/", "runs/", "~/", "DIR/", "W/")


def _sources() -> list[tuple[str, str]]:
    """(name, text) of every place a command is shown: the markdown files
    and the entry points' docstrings (the head of their --help)."""
    found = [(str(p.relative_to(ROOT)), p.read_text()) for p in _docs()]
    for entry in ENTRY_POINTS:
        tree = ast.parse((ROOT / entry).read_text())
        found.append((f"{entry} --help", ast.get_docstring(tree) or ""))
    return found


def _docs() -> list[pathlib.Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _joined_lines(text: str) -> list[str]:
    """The lines of `text`, a line ending in a backslash joined to the
    next."""
    return text.replace("\\\n", " ").splitlines()


def documented_commands() -> list[tuple[str, str]]:
    """(where, command) of each `python <entry point> ...` shown, in code
    blocks, docstrings and inline code, comments dropped."""
    commands = []
    for where, text in _sources():
        for line in _joined_lines(text):
            spans = re.findall(r"`([^`]+)`", line) or [line]
            for span in spans:
                match = _COMMAND.search(span)
                if match:
                    command = span[match.start() :].split("  #")[0]
                    commands.append((where, command.strip()))
    return sorted(set(commands))


@functools.cache
def entry_flags(entry: str) -> frozenset[str]:
    """The flags `entry`'s --helpfull lists (booleans by their name)."""
    shown = subprocess.run(
        [sys.executable, entry, "--helpfull"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return frozenset(re.findall(r"--(?:\[no\])?([a-z_][a-z0-9_]*)", shown))


@functools.cache
def config_of(path: str):
    """The ConfigDict of a `--config=` value (a file, variants after ':')."""
    from detector.launch import config_file

    return config_file.ConfigFileParser("config").parse(str(ROOT / path))


def _flags(command: str) -> tuple[str, dict[str, str]]:
    """(entry point, {flag: value}) of `command`."""
    words = shlex.split(command)
    entry, values = words[1], {}
    for word in words[2:]:
        if word.startswith("--"):
            name, _, value = word[2:].partition("=")
            values[name] = value
    return entry, values


def problems(command: str) -> list[str]:
    """What keeps `command` from running as written."""
    entry, values = _flags(command)
    found = []
    known = entry_flags(entry)
    config_path = values.get("config", "configs/shapes.py")
    for name, value in values.items():
        base = name.removeprefix("no") if name not in known else name
        if name.startswith("config."):
            config = config_of(config_path)
            node = config
            for key in name.split(".")[1:]:
                if key not in node:
                    found.append(f"--{name}: no such config field")
                    break
                node = node[key]
        elif base not in known:
            found.append(f"--{name}: not a flag of {entry}")
        elif name == "config" and not _made_by_a_run(value):
            file = value.split(":")[0]
            if not (ROOT / file).is_file():
                found.append(f"--config={value}: no such file")
        elif name == "classes" and _shapes_model(values):
            categories = [c["name"] for c in shapes_writer.CATEGORIES]
            for entry_name in value.split(","):
                if entry_name not in categories:
                    found.append(
                        f"--classes={value}: {entry_name!r} is no category "
                        f"of the model it runs ({', '.join(categories)})"
                    )
    return found


def _made_by_a_run(path: str) -> bool:
    """Whether `path` is a file an earlier documented command writes."""
    return path.startswith(_RUN_FOLDERS)


def _shapes_model(values: dict[str, str]) -> bool:
    """Whether a predict.py command runs the default shapes model (its
    workdir or artifact under workdirs/shapes)."""
    return "workdirs/shapes" in values.get("workdir", "") + values.get(
        "exported", ""
    )


def test_commands_are_found():
    commands = [c for _, c in documented_commands()]
    assert any(c.startswith("python predict.py") for c in commands)
    assert any("--classes=" in c for c in commands)
    assert len({c.split()[1] for c in commands}) == len(ENTRY_POINTS)


@pytest.mark.parametrize(
    ("where", "command"),
    [pytest.param(w, c, id=f"{w}: {c[:60]}") for w, c in documented_commands()],
)
def test_documented_command_runs_as_written(where, command):
    assert problems(command) == [], where


def test_a_wrong_class_name_is_found():
    shown = problems(
        "python predict.py --exported=workdirs/shapes/export --out=p "
        "--classes=square,circle photos/"
    )
    assert shown == [
        "--classes=square,circle: 'square' is no category of the model it "
        "runs (circle, rectangle, triangle)"
    ]
    assert problems("python eval.py --workdir=w --bogus=1") == [
        "--bogus: not a flag of eval.py"
    ]


def _shapes_commands(entry: str) -> list[str]:
    """The documented `entry` commands that run the default shapes
    workdir (workdirs/shapes), each once."""
    found = []
    for _, command in documented_commands():
        words = shlex.split(command)
        values = _flags(command)[1]
        if words[1] == entry and _shapes_model(values) and command not in found:
            found.append(command)
    return found


@pytest.mark.slow
def test_the_export_and_predict_commands_run_as_written(tmp_path):
    """Each documented export.py and predict.py command on the shapes
    workdir runs as written, in a folder laid out as the docs assume:
    workdirs/shapes (the shapes model, untrained: predict_workdir),
    photos/, a.jpg and more/a.jpg."""
    from PIL import Image

    from tests.helpers import predict_workdir

    predict_workdir.make(tmp_path / "workdirs" / "shapes")
    (tmp_path / "photos").mkdir()
    for name, size in (("x.png", (96, 128)), ("y.jpg", (120, 80))):
        Image.new("RGB", size[::-1], (90, 120, 30)).save(
            tmp_path / "photos" / name
        )
    (tmp_path / "more").mkdir()
    for path in (tmp_path / "a.jpg", tmp_path / "more" / "a.jpg"):
        Image.new("RGB", (64, 48), (10, 20, 30)).save(path)
    commands = _shapes_commands("export.py") + _shapes_commands("predict.py")
    assert len(commands) >= 4, commands
    for command in commands:
        words = shlex.split(command)
        ran = subprocess.run(
            [sys.executable, str(ROOT / words[1]), *words[2:]],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert ran.returncode == 0, f"{command}\n{ran.stderr[-2000:]}"
