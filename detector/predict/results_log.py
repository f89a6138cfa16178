"""predictions.jsonl: each image's results appended as its batch ends, so an
interrupted run keeps them and the same command continues. A line is
reused for a file of the same resolved path and bytes (sha256) predicted by
the same model."""

import hashlib
import json
import os
import pathlib
import sys

from detector.utils import files, text

# A well-formed line: key -> the type of its value.
_FIELDS = {"file": str, "sha256": str, "model": str, "results": list}


def file_key(path: pathlib.Path) -> tuple[str, str] | None:
    """(resolved path, sha256 of its bytes) of `path`; None when it cannot
    be read (it is then predicted, and skipped, again). Hashing reads the
    bytes once, far less than decoding them."""
    try:
        with open(path, "rb") as f:
            digest = hashlib.file_digest(f, "sha256").hexdigest()
    except OSError:
        return None
    return os.path.realpath(path), digest


def _malformed(record: object) -> str | None:
    """Why `record` is not a well-formed line (None: it is)."""
    if not isinstance(record, dict):
        return "not a JSON object"
    for key, kind in _FIELDS.items():
        if not isinstance(record.get(key), kind):
            return f"{key} is not a JSON {'string' if kind is str else 'list'}"
    if not all(isinstance(r, dict) for r in record["results"]):
        return "results is not a list of objects"
    return None


def _whole_lines(path: pathlib.Path) -> list[dict]:
    """The well-formed lines of `path`. A cut last line is removed from it;
    any other malformed line is reported in one line each and removed."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    end = data.rfind(b"\n") + 1
    kept, dropped = [], False
    for number, line in enumerate(data[:end].splitlines(), 1):
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):  # nesting past the stack
            record, why = None, "not JSON"
        else:
            why = _malformed(record)
        if why is None:
            kept.append((line, record))
            continue
        dropped = True
        print(
            text.printable(
                f"{path}: line {number} dropped ({why}); its image is "
                "predicted again"
            ),
            file=sys.stderr,
        )
    if dropped:
        files.write_bytes(path, b"".join(line + b"\n" for line, _ in kept))
    elif end < len(data):
        os.truncate(path, end)
    return [record for _, record in kept]


class ResultsLog:
    """An open predictions.jsonl (docs/export-and-predict.md): a last line
    cut short (a kill mid-write) is dropped when it is opened, as is any
    line of the wrong shape (one line each), and a link in its place is
    removed, never appended through."""

    def __init__(
        self,
        path: pathlib.Path,
        model: str,
        done: dict,
        records: dict[tuple[str, str, str], dict] | None = None,
        count: int = 0,
    ):
        self.path, self._model, self._done = path, model, done
        # (file, sha256, model) -> its last line, in the order last written.
        self._records = {} if records is None else records
        self._count = count  # lines in the file
        self._keys: dict[pathlib.Path, tuple[str, str] | None] = {}
        self._file = open(path, "ab")  # noqa: SIM115 - closed by close()

    @classmethod
    def open(
        cls, path: pathlib.Path, model: str, *, fresh: bool = False
    ) -> "ResultsLog":
        """Opens `path` for appending, reading what it holds; `fresh`
        reuses none of its results (the files named are all predicted
        again), while the other files' stay (`earlier`)."""
        if path.is_symlink():  # never appended through a link
            path.unlink()
        records: dict[tuple[str, str, str], dict] = {}
        lines = _whole_lines(path)
        for line in lines:
            key = (line["file"], line["sha256"], line["model"])
            records.pop(key, None)
            records[key] = line
        done = {} if fresh else {k: v["results"] for k, v in records.items()}
        return cls(path, model, done, records, len(lines))

    def _key(self, path: pathlib.Path) -> tuple[str, str, str] | None:
        """(resolved path, sha256, model) of `path`, hashed once a run."""
        if path not in self._keys:
            self._keys[path] = file_key(path)
        key = self._keys[path]
        return None if key is None else (*key, self._model)

    def decoded(self, path: pathlib.Path, data: bytes) -> None:
        """Keys the results of `path` by the sha256 of `data`, the bytes
        read to decode it: a file replaced after the run started (and
        perhaps restored) keeps no results of bytes it does not hold."""
        digest = hashlib.sha256(data).hexdigest()
        self._keys[path] = (os.path.realpath(path), digest)

    def done(self, path: pathlib.Path) -> list[dict] | None:
        """The results of `path` as it is now, by this model; or None."""
        return self._done.get(self._key(path))

    def append(self, finished: list[tuple[pathlib.Path, list[dict]]]) -> None:
        """Appends one line per (path, results) and syncs them to disk."""
        lines = []
        for path, results in finished:
            key = self._key(path) or (os.path.realpath(path), "", self._model)
            self._done[key] = results
            file, sha256, model = key
            line = {
                "file": file,
                "name": str(path),
                "sha256": sha256,
                "model": model,
                "results": results,
            }
            self._records.pop(key, None)
            self._records[key] = line
            lines.append(json.dumps(line) + "\n")
        with files.naming(self.path):
            self._file.write("".join(lines).encode())
            self._file.flush()
            os.fsync(self._file.fileno())
        self._count += len(lines)

    def earlier(
        self, named: list[pathlib.Path], taken: set[str]
    ) -> dict[str, list[dict]]:
        """{name: results} of each file this log holds that is none of
        `named` (compared resolved): its last line, as its overlay shows
        it, named as the run that predicted it named it (resolved where
        that name is in `taken` or another file's)."""
        skip = {os.path.realpath(path) for path in named}
        latest = {line["file"]: line for line in self._records.values()}
        found: dict[str, list[dict]] = {}
        for file, line in latest.items():
            if file in skip:
                continue
            name = line.get("name")
            if not isinstance(name, str) or name in taken or name in found:
                name = file
            found[name] = line["results"]
        return found

    def compact(self) -> None:
        """Closes the file and rewrites it without the lines a later line
        of the same file, bytes and model replaced (--overwrite's), so that
        it grows with the images, not with the runs."""
        self.close()
        if self._count > len(self._records):
            files.write_bytes(
                self.path,
                b"".join(
                    json.dumps(line).encode() + b"\n"
                    for line in self._records.values()
                ),
            )
            self._count = len(self._records)

    def close(self) -> None:
        self._file.close()
