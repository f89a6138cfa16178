"""--help of every entry point: its own flags, those that the shared modules
define for it included (--config, --multihost, ...), and exit status 0.

Imports absl only, so that predict.py --exported stays light."""

import sys
from collections.abc import Callable

from absl import flags

# absl's help flags (absl.app's HelpFlag, HelpshortFlag, HelpfullFlag,
# HelpXMLFlag), which print and exit with status 1.
HELP_FLAGS = ("help", "helpshort", "helpfull", "helpxml", "?")
# Modules whose flags an entry point defines through them (cli.py's
# define_config and MultihostFlags): listed as the program's own.
SHARED_PREFIX = "detector."


def asks_for_help(args: list[str]) -> bool:
    """Whether `args` (no program name) hold a help flag."""
    return any(
        arg.lstrip("-").split("=")[0] in HELP_FLAGS
        for arg in args
        if arg.startswith("-")
    )


def own_shared_flags(
    flag_values: flags.FlagValues = flags.FLAGS,
    helpfull_only: tuple[str, ...] = (),
) -> None:
    """Lists the flags the shared modules define as the main program's
    key flags: --help shows them, not only --helpfull; those named in
    `helpfull_only` (multi-host start-up) stay under --helpfull."""
    main = sys.argv[0]
    for module, defined in flag_values.flags_by_module_dict().items():
        if module.startswith(SHARED_PREFIX):
            for flag in defined:
                if flag.name not in helpfull_only:
                    flag_values.register_key_flag_for_module(main, flag)


def parse(
    argv: list[str],
    parser: Callable[[list[str]], list[str]],
    helpfull_only: tuple[str, ...] = (),
) -> list[str]:
    """`parser(argv)` (an absl flags parser for app.run), with --help
    listing the shared flags but `helpfull_only` and exiting with status
    0."""
    own_shared_flags(helpfull_only=helpfull_only)
    try:
        return parser(argv)
    except SystemExit as e:
        if e.code == 1 and asks_for_help(argv[1:]):
            sys.exit(0)
        raise
