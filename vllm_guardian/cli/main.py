"""``guardian``: the one entry point. The only module that parses argv and exits; each command lives
in its own module of this package (``parser`` lists them).

Every failure is one line on stderr that says what failed, where, and what to do; the exit codes
(``EXIT_CODES``, listed in docs/operate.md) let scripts tell them apart. ``GUARDIAN_DEBUG=1`` adds
the Python traceback of an unexpected error.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from vllm_guardian.cli.parser import build_parser
from vllm_guardian.errors import CannotStart, ConfigError, GuardianError
from vllm_guardian.surface.terminal import EscapingWriter

EXIT_CODES = {
    0: "ok",
    1: "runtime failure: the daemon or Redis not reachable, nothing found, a request refused",
    2: "usage or configuration error: the message names the option or config key",
    3: "cannot start: the HTTP port is taken or another guardian holds the state dir",
    70: "internal error (a bug): rerun with GUARDIAN_DEBUG=1 and report the traceback",
    130: "interrupted (Ctrl-C)",
    141: "the output pipe was closed (e.g. `| head`): nothing else went wrong",
}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    stdout = sys.stdout
    if args.command != "run":  # text for a person's terminal: others' control characters made visible
        sys.stdout = EscapingWriter(stdout)
    try:
        return _main(args)
    finally:
        sys.stdout = stdout


def _main(args: argparse.Namespace) -> int:
    try:
        code = args.fn(args)
        sys.stdout.flush()  # a closed pipe shows here, inside the try, not at interpreter exit
        return code
    except ConfigError as e:
        for line in e.problems:
            print(f"guardian: {line}", file=sys.stderr)
        return 2
    except CannotStart as e:
        print(f"guardian: {e}", file=sys.stderr)
        return 3
    except GuardianError as e:
        print(f"guardian: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        _quiet_stdout()
        return 141
    except OSError as e:
        where = f" ({e.filename})" if e.filename else ""
        print(f"guardian {args.command}: {e.strerror or e}{where}; check the path and its permissions", file=sys.stderr)
        return 1
    except Exception as e:  # the last resort (re-raised with GUARDIAN_DEBUG): one line, not a traceback
        if os.environ.get("GUARDIAN_DEBUG"):
            raise
        print(
            f"guardian {args.command}: internal error {type(e).__name__}: {e} "
            "(a bug: rerun with GUARDIAN_DEBUG=1 for the traceback and report it)",
            file=sys.stderr,
        )
        return 70


def _quiet_stdout() -> None:
    """After EPIPE: point stdout at /dev/null so the interpreter's last flush does not complain."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
