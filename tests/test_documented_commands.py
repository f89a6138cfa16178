"""Every command README.md, docs/ and the entry points' --help texts show
runs as written.

Checked statically (the default stage): its flags exist, its config fields
and files do, and the categories it names are the model's. Run (slow), in
a folder laid out as the docs assume the repository: `python train.py`
into workdirs/shapes with a small budget appended (SMALL, never a flag the
command sets itself), then every command that reads that workdir, in
order; every other command in a folder of its own. A command that cannot
run here is in NOT_RUN with the reason, and a command is either run or
there."""

import ast
import contextlib
import functools
import pathlib
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time

import pytest

from detector.data import shapes_writer
from tests.helpers import commands as commands_lib
from tests.helpers import processes

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
                if not match:
                    continue
                shown = span[match.start() :].split("  #")[0]
                # A console line's "next: A, B, C" names three commands.
                for command in re.split(r",\s+(?=python )", shown):
                    commands.append((where, " ".join(command.split())))
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


# Documented commands that cannot run here, each with the reason.
_COCO = "COCO 2017 (docs/coco.md), which is not here"
_TORCHVISION = "torchvision's COCO weights (a download) and COCO 2017"
NOT_RUN = {
    "python eval.py --workdir=DIR --config=configs/coco_r50_fpn.py "
    "--split='val2017[:500]' --nms=pallas --max_images=100": _COCO,
    "python eval.py --workdir=runs/r50_1x": f"a run on {_COCO}",
    "python eval.py --workdir=runs/torchvision_coco "
    "--config=configs/coco_r50_fpn.py:torchvision "
    "--config.data.root=data/coco": _TORCHVISION,
    "python eval.py --workdir=workdirs/shapes --config.data.root=/new/place": (
        "/new/place stands for wherever the data was moved"
    ),
    "python export.py --workdir=runs/torchvision_coco "
    "--config=configs/coco_r50_fpn.py:torchvision "
    "--config.data.root=data/coco": _TORCHVISION,
    "python predict.py --exported=<out> IMAGES...": (
        "<out> and IMAGES... stand for an artifact and the user's images"
    ),
    "python predict.py --exported=runs/torchvision_coco/export --out=preds "
    "photos/": f"the artifact of {_TORCHVISION}",
    "python predict.py --exported=runs/torchvision_coco/export photos/": (
        f"the artifact of {_TORCHVISION}"
    ),
    "python predict.py --workdir=workdirs/shapes IMAGES...": (
        "IMAGES... stands for the user's images"
    ),
    "python train.py --config=configs/coco_r50_fpn.py --workdir=DIR "
    "--nms=pallas": _COCO,
    "python train.py --config=configs/coco_r50_fpn.py --workdir=runs/mine "
    "--config.data.root=data/mine --config.data.train_split=train "
    "--config.data.eval_split=val --config.data.num_classes=5 "
    "--config.model.backbone_init= --config.model.init_checkpoint=runs/r50_1x "
    "--config.train.batch_size=8 --config.train.num_steps=5000 "
    "--config.train.warmup_steps=200": f"a run on {_COCO} (runs/r50_1x)",
    "python train.py --config=configs/coco_r50_fpn.py --workdir=runs/r50 "
    "--config.data.root=/data/coco": _COCO,
    "python train.py --config=configs/coco_r50_fpn.py --workdir=runs/r50 "
    "--config.data.root=/data/coco --nms=pallas": _COCO,
    "python train.py --config=configs/coco_r50_fpn.py --workdir=runs/r50_1x "
    "--config.data.root=data/coco "
    "--config.model.backbone_init=data/resnet50.safetensors": (
        f"{_COCO} and ImageNet weights"
    ),
    "python train.py --config=configs/coco_r50_fpn.py:gn_scratch "
    "--workdir=runs/syncbn --config.data.root=data/coco "
    "--config.model.norm=sync_batch --config.model.fpn_norm=sync_batch "
    "--config.model.rpn.head_convs=2 --config.model.roi.box_head=4conv1fc "
    "--config.model.roi.box_head_norm=sync_batch "
    "--config.model.roi.mask_head_norm=sync_batch": _COCO,
    "python train.py --config=configs/coco_r50_fpn.py:torchvision "
    "--workdir=runs/mine --config.data.root=data/mine "
    "--config.data.train_split=train --config.data.eval_split=val "
    "--config.data.num_classes=5 --config.train.num_steps=5000": (
        "torchvision's COCO weights (a download)"
    ),
}
# What a documented train.py command gets appended, each unless the
# command sets it itself: the smoke data, 2 steps of batch 2, the
# fastest-compiling NMS.
SMALL = {
    "nms": "while_loop",
    "config.data.shapes.num_train": "16",
    "config.data.shapes.num_val": "8",
    "config.train.batch_size": "2",
    "config.train.num_steps": "2",
    "config.train.warmup_steps": "1",
    "config.train.log_every": "1",
    "config.train.checkpoint_every": "2",
    "config.eval.batch_size": "4",
}
# The workdir the other commands read, and the folders that stand for it.
_SHAPES = "workdirs/shapes"
_STANDS_FOR_SHAPES = ("DIR", "W", "home/runs/b")


def _small(words: list[str]) -> list[str]:
    """SMALL's flags that `words` (a train.py command's) does not set."""
    own = {w[2:].partition("=")[0] for w in words if w.startswith("--")}
    return [f"--{k}={v}" for k, v in SMALL.items() if k not in own]


def _argv(command: str) -> tuple[list[str], str | None]:
    """(argv, the file `> FILE` sends stdout to) of `command` as bash
    reads it (quotes, no `~` after `=`), SMALL appended to train.py's."""
    words = shlex.split(command.removesuffix(" &"))
    out = None
    if ">" in words:
        out = words[words.index(">") + 1]
        words = words[: words.index(">")]
    argv = [str(ROOT / words[1]), *words[2:]]
    if words[1] == "train.py":
        argv += _small(words)
    return argv, out


def _env(folder: pathlib.Path) -> dict[str, str]:
    """processes.env() with HOME in `folder` (`~/runs/b`)."""
    return {**processes.env(), "HOME": str(folder / "home")}


def _lay_out(folder: pathlib.Path) -> pathlib.Path:
    """`folder` as the docs assume the repository: configs/, photos/,
    a.jpg, more/a.jpg, data/mine (a small COCO folder); returns it."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "configs").symlink_to(ROOT / "configs")
    (folder / "photos").mkdir()
    for name, size in (("x.png", (96, 128)), ("y.jpg", (120, 80))):
        Image.new("RGB", size[::-1], (90, 120, 30)).save(
            folder / "photos" / name
        )
    (folder / "more").mkdir()
    for path in (folder / "a.jpg", folder / "more" / "a.jpg"):
        Image.new("RGB", (64, 48), (10, 20, 30)).save(path)
    shapes_writer.write_dataset(str(folder / "data" / "mine"), 16, 8)
    (folder / "home").mkdir()
    return folder


def _run(command: str, folder: pathlib.Path) -> subprocess.CompletedProcess:
    """`command` run to its end in `folder`."""
    argv, out = _argv(command)
    with contextlib.ExitStack() as stack:
        stdout = (
            stack.enter_context(open(folder / out, "w"))
            if out
            else subprocess.PIPE
        )
        return subprocess.run(
            [sys.executable, *argv],
            cwd=folder,
            env=_env(folder),
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
            timeout=processes.TIMEOUT_S,
        )


def _ran(command: str, result: subprocess.CompletedProcess) -> None:
    """Asserts that `command` ran: exit 0, no traceback, no error line."""
    shown = f"{command}\n{result.stderr[-3000:]}"
    assert result.returncode == 0, shown
    assert "Traceback" not in result.stderr, shown
    assert "\nerror: " not in f"\n{result.stderr}", shown


def _to_run() -> list[str]:
    """The documented commands not in NOT_RUN, each once."""
    return sorted({c for _, c in documented_commands()} - set(NOT_RUN))


def _reads_shapes(command: str) -> bool:
    """Whether `command` reads the shapes workdir (or a copy of it)."""
    values = _flags(command)[1]
    paths = (values.get(k, "") for k in ("workdir", "exported", "config"))
    return any(p.startswith((_SHAPES, "~/runs/b", "DIR", "W")) for p in paths)


def _order(command: str) -> int:
    return ENTRY_POINTS.index(_flags(command)[0])


def _shapes_chain() -> list[str]:
    """`python train.py` (into workdirs/shapes), then every other command
    that reads that workdir, eval.py before export.py before predict.py."""
    rest = [c for c in _to_run() if _reads_shapes(c)]
    return ["python train.py", *sorted(rest, key=_order)]


def _alone() -> list[str]:
    """The other commands, each run in a folder of its own."""
    chain = _shapes_chain()
    alone = [c for c in _to_run() if c not in chain]
    # A job's process 0 (`... &`) runs with process 1, its partner.
    return [c for c in alone if not c.endswith(" &")]


def _partner(command: str) -> str | None:
    """The `... &` command that starts with `command` as one job."""
    for other in _to_run():
        if (
            other.endswith(" &")
            and other.removesuffix(" &").replace(
                "--process_id=0", "--process_id=1"
            )
            == command
        ):
            return other
    return None


def test_every_documented_command_is_run_or_named_as_not_run():
    every = {c for _, c in documented_commands()}
    assert not set(NOT_RUN) - every, "NOT_RUN names a command no doc shows"
    run = set(_shapes_chain()) | set(_alone())
    run |= {_partner(c) for c in _alone() if _partner(c)}
    assert every - set(NOT_RUN) == run
    assert "python train.py --print_config > my.json" in _alone()


def test_small_flags_never_change_the_commands_own():
    argv, out = _argv(
        "python train.py --config.train.num_steps=500 --print_config > my.json"
    )
    assert out == "my.json"
    assert argv.count("--config.train.num_steps=500") == 1
    assert not [a for a in argv if a.startswith("--config.train.num_steps=2")]
    assert "--nms=while_loop" in argv
    assert _argv("python eval.py --workdir=W --split='val[:1]'")[0][1:] == [
        "--workdir=W",
        "--split=val[:1]",
    ]


def _full_run_keeps() -> set[int]:
    """The steps whose checkpoints `python train.py` (configs/shapes.py
    as it is) keeps: the newest keep_checkpoints of those it saves."""
    train = config_of("configs/shapes.py").train
    every, last = train.checkpoint_every, train.num_steps
    saved = sorted({*range(every, last + 1, every), last})
    return set(saved[-train.keep_checkpoints :])


def _kept_steps(workdir: pathlib.Path, commands: list[str]) -> None:
    """The checkpoints the commands name by `--step=N`, each one the full
    run keeps, laid out as it keeps them: copies of the trained step."""
    checkpoints = workdir / "checkpoints"
    (trained,) = [p for p in checkpoints.iterdir() if p.name.isdigit()]
    for command in commands:
        step = _flags(command)[1].get("step")
        if step and not (checkpoints / step).exists():
            shutil.copytree(trained, checkpoints / step)


def test_a_step_a_command_names_is_one_the_full_run_keeps():
    keeps = _full_run_keeps()
    assert keeps == {1000, 1500, 1800}
    for command in _shapes_chain():
        step = _flags(command)[1].get("step")
        assert step is None or int(step) in keeps, command


@pytest.mark.slow
def test_the_shapes_commands_run_as_written(tmp_path):
    """`python train.py` (SMALL: 2 steps) into workdirs/shapes, then each
    documented command that reads it, as written, in order; DIR, W and
    ~/runs/b are copies of it, and the steps named by `--step=N` are
    copies of its checkpoint, as the full run keeps them."""
    folder = _lay_out(tmp_path / "clone")
    chain = _shapes_chain()
    _ran(chain[0], _run(chain[0], folder))
    _kept_steps(folder / _SHAPES, chain)
    for copy in _STANDS_FOR_SHAPES:
        shutil.copytree(folder / _SHAPES, folder / copy)
    for command in chain[1:]:
        _ran(command, _run(command, folder))


# Documented commands whose own flags ask for a long run: run as written
# (SMALL appended) until they log their first step, then stopped by
# SIGTERM, which saves that step.
_LONG = re.compile(r"--config\.train\.num_steps=[0-9]{3,}")


def _stopped_after_a_step(command: str, folder: pathlib.Path) -> None:
    argv, _ = _argv(command)
    logs = folder / "logs"
    with processes.started([(argv, _env(folder))], logs, folder) as (one,):
        deadline = time.monotonic() + processes.TIMEOUT_S
        while not re.search(r"step \d+/\d+", (logs / "0.log").read_text()):
            assert one.poll() is None, (logs / "0.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "no step logged"
            time.sleep(0.2)
        one.send_signal(signal.SIGTERM)
        ((code, output),) = processes.finish([one], logs)
    assert code == 128 + signal.SIGTERM, f"{command}\n{output[-3000:]}"
    assert re.search(r"^preempted at step \d+: checkpoint saved$", output, re.M)


def _refused_as_shown(command: str, result: subprocess.CompletedProcess):
    """Asserts that `command` ends in the one error line the docs show
    beneath it."""
    shown = "\n".join(text for _, text in _sources())
    line = commands_lib.error_line(result)
    assert f"$ {command}\n{line}\n" in shown, line


def _documented_failure(command: str) -> bool:
    """Whether the docs show `command` ending in an error line."""
    return any(
        re.search(rf"^\$ {re.escape(command)}\nerror: ", text, re.M)
        for _, text in _sources()
    )


@pytest.mark.slow
@pytest.mark.parametrize("command", _alone())
def test_a_command_of_its_own_runs_as_written(tmp_path, command):
    """Each train.py command that starts its own run, in a fresh folder:
    to its end (SMALL appended), or a long one until its first step, or
    to the error line the docs show; a job's two processes together."""
    folder = _lay_out(tmp_path / "clone")
    partner = _partner(command)
    if partner:
        commands = [(_argv(c)[0], _env(folder)) for c in (partner, command)]
        results = processes.run(commands, folder / "logs", folder)
        for code, output in results:
            assert code == 0, f"{command}\n{output[-3000:]}"
    elif _LONG.search(command):
        _stopped_after_a_step(command, folder)
    elif _documented_failure(command):
        _refused_as_shown(command, _run(command, folder))
    else:
        _ran(command, _run(command, folder))
