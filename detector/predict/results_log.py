"""predictions.jsonl: each image's results appended as its batch ends, so an
interrupted run keeps them and the same command continues."""

import json
import os
import pathlib


def _key(path: pathlib.Path, model: str) -> tuple | None:
    """(file, size, mtime_ns, model) of `path`; None when it cannot be
    read (it is then predicted, and skipped, again)."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return (str(path), stat.st_size, stat.st_mtime_ns, model)


def _whole_lines(path: pathlib.Path) -> list[dict]:
    """The whole lines of `path`; a cut last line is removed from it."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    end = data.rfind(b"\n") + 1
    if end < len(data):
        os.truncate(path, end)
    lines = []
    for line in data[:end].splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            lines.append(record)
    return lines


class ResultsLog:
    """An open predictions.jsonl (docs/export-and-predict.md): a last line
    cut short (a kill mid-write) is dropped when it is opened, and a link in
    its place is removed, never appended through."""

    def __init__(self, path: pathlib.Path, model: str, done: dict):
        self.path, self._model, self._done = path, model, done
        self._file = open(path, "ab")  # noqa: SIM115 - closed by close()

    @classmethod
    def open(
        cls, path: pathlib.Path, model: str, *, fresh: bool = False
    ) -> "ResultsLog":
        """Opens `path` for appending, reading what it holds unless
        `fresh` (then it starts empty)."""
        if fresh or path.is_symlink():  # never appended through a link
            path.unlink(missing_ok=True)
        done = {}
        for line in _whole_lines(path):
            key = tuple(line.get(k) for k in ("file", "size", "mtime_ns"))
            done[(*key, line.get("model"))] = line.get("results")
        return cls(path, model, done)

    def done(self, path: pathlib.Path) -> list[dict] | None:
        """The results of `path` as it is now, by this model; or None."""
        return self._done.get(_key(path, self._model))

    def append(self, finished: list[tuple[pathlib.Path, list[dict]]]) -> None:
        """Appends one line per (path, results) and syncs them to disk."""
        lines = []
        for path, results in finished:
            key = _key(path, self._model) or (str(path), 0, 0, self._model)
            self._done[key] = results
            file, size, mtime_ns, model = key
            lines.append(
                json.dumps(
                    {
                        "file": file,
                        "size": size,
                        "mtime_ns": mtime_ns,
                        "model": model,
                        "results": results,
                    }
                )
                + "\n"
            )
        self._file.write("".join(lines).encode())
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()
