"""detector/utils/progress.py: a bar only where a person watches a terminal."""

import io
import sys

import pytest

from detector.utils import progress


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_no_bar_when_stdout_is_not_a_terminal(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    assert not progress.enabled()
    assert list(progress.bar(range(3), desc="Writing")) == [0, 1, 2]
    assert capsys.readouterr().err == ""


def test_bar_on_a_terminal_yields_every_item(monkeypatch):
    pytest.importorskip("tqdm")
    err = io.StringIO()
    monkeypatch.setattr(sys, "stdout", _Terminal())
    monkeypatch.setattr(sys, "stderr", err)
    assert progress.enabled()
    items = progress.bar(iter(range(5)), total=5, desc="Writing", unit="img")
    assert list(items) == [0, 1, 2, 3, 4]
    assert "Writing:   0%|" in err.getvalue() and "0/5" in err.getvalue()


def test_a_delayed_bar_stays_hidden_for_a_short_loop(monkeypatch):
    pytest.importorskip("tqdm")
    err = io.StringIO()
    monkeypatch.setattr(sys, "stdout", _Terminal())
    monkeypatch.setattr(sys, "stderr", err)
    assert list(progress.bar(range(3), desc="Predicting", delay_s=60)) == [
        0,
        1,
        2,
    ]
    assert "Predicting" not in err.getvalue()
