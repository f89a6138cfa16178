"""Checks of the entry points run as commands."""

import subprocess


def error_line(result: subprocess.CompletedProcess) -> str:
    """The one `error:` line of a failed command; asserts there is no
    traceback and exit status 1."""
    assert result.returncode == 1, result.stderr[-2000:]
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    errors = [
        line
        for line in result.stderr.splitlines()
        if line.startswith("error: ")
    ]
    assert len(errors) == 1, result.stderr[-2000:]
    return errors[0]
