"""The config found from the command line: `--config.<section>.<field>`
in --help, near-miss suggestions searched in every section, and the
resolved config printed (--print_config) as config.json holds it."""

import difflib

import ml_collections

from detector.launch import config_history

# How close a misspelt name must be to a field's to be suggested.
CLOSE = 0.75
# Suggestions named in one line at most.
MAX_SUGGESTIONS = 3


def field_paths(config: ml_collections.ConfigDict, prefix: str = "") -> list:
    """Every leaf field of `config` as a dotted path ('train.num_steps')."""
    paths = []
    for key in sorted(config.keys()):
        value = config[key]
        if isinstance(value, ml_collections.ConfigDict):
            paths += field_paths(value, f"{prefix}{key}.")
        else:
            paths.append(f"{prefix}{key}")
    return paths


def _initials(name: str) -> str:
    """'learning_rate' -> 'lr'."""
    return "".join(word[0] for word in name.split("_") if word)


def suggest(given: str, config: ml_collections.ConfigDict) -> list[str]:
    """Fields of `config` the dotted path `given` likely meant, best first:
    the same name in another section, a name whose initials it is
    ('lr': learning_rate), a close spelling of the name or the path."""
    paths = field_paths(config)
    name = given.rsplit(".", 1)[-1]

    def leaf(path: str) -> str:
        return path.rsplit(".", 1)[-1]

    close = difflib.get_close_matches(
        name, {leaf(p) for p in paths}, n=MAX_SUGGESTIONS, cutoff=CLOSE
    )
    tiers = (
        [p for p in paths if leaf(p) == name],
        [p for p in paths if len(name) > 1 and _initials(leaf(p)) == name],
        [p for n in close for p in paths if leaf(p) == n]
        + difflib.get_close_matches(given, paths, cutoff=CLOSE),
    )
    found = next((tier for tier in tiers if tier), [])
    section = given.split(".", 1)[0]
    unique = sorted(  # its own section's first, then the shallowest
        dict.fromkeys(found),
        key=lambda p: (not p.startswith(section + "."), p.count(".")),
    )
    return unique[:MAX_SUGGESTIONS]


def unknown_field_line(
    arg: str, key: str, config: ml_collections.ConfigDict
) -> str:
    """The error line of override `arg` whose `key` is no config field."""
    given = arg.split("=", 1)[0].removeprefix("--").split(".", 1)[-1]
    found = suggest(given, config)
    hint = (
        "did you mean " + " or ".join(repr(p) for p in found) + "?"
        if found
        else "--print_config lists every field"
    )
    return f"{arg}: {key!r} is not a config field; {hint}"


def override_help(config: ml_collections.ConfigDict) -> str:
    """What --help says of setting fields from the command line."""
    sections = sorted(
        k for k in config if isinstance(config[k], ml_collections.ConfigDict)
    )
    return (
        "Any field is set as --config.<section>.<field>=VALUE (sections: "
        f"{', '.join(sections)}); --print_config prints every field with "
        "its value and exits."
    )


def printed(config: ml_collections.ConfigDict) -> str:
    """`config` as JSON, as config.json holds it: eval.py's --config (and
    train.py's) reads it back as the same config."""
    return config_history.json_text(config)
