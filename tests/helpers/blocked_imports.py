"""Python code run in a child process where some modules cannot be
imported, from the repository root (tests/test_imports.py,
tests/test_without_tensorflow.py)."""

import ast
import pathlib
import subprocess
import sys
import textwrap

ROOT = pathlib.Path(__file__).resolve().parents[2]


def run(
    code: str, *args: str, blocked: tuple[str, ...], timeout: float = 300
) -> subprocess.CompletedProcess:
    """Runs `code` (dedented; `sys` imported) with the top-level packages
    `blocked` looking not installed (`requires.block`: `import` raises
    ModuleNotFoundError, `importlib.util.find_spec` returns None); `args`
    are its sys.argv[1:]."""
    blocker = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
from tests.helpers import requires
requires.block({blocked!r})
"""
    return subprocess.run(
        [sys.executable, "-c", blocker + textwrap.dedent(code), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def blocked_loaded(
    modules: tuple[str, ...], blocked: tuple[str, ...]
) -> list[str]:
    """The modules of `blocked` loaded after importing `modules` with them
    unimportable (an import that fails raises AssertionError with its
    error)."""
    result = run(
        f"""
        import importlib
        for name in {modules!r}:
            importlib.import_module(name)
        print("loaded:", sorted(m for m, module in sys.modules.items()
                                if m.split(".")[0] in {blocked!r}
                                and module is not None))
        """,
        blocked=blocked,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (line,) = [x for x in result.stdout.splitlines() if x.startswith("loaded:")]
    return ast.literal_eval(line.removeprefix("loaded:"))
