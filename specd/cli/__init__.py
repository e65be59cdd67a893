"""The ``specd`` command: one module per subcommand, the shared settings flags in
:mod:`specd.cli.flags`. Everything that parses arguments or prints for a person lives here; the
packages below (daemon, LSP server, bench, engine, models) expose functions and classes only."""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Sequence

from specd.engine.errors import UnsupportedDrafter, VocabularyMismatch
from specd.models.errors import ModelError
from specd.requests import Cancelled, RequestError
from specd.schema import ConfigError

COMMANDS = ("complete", "serve", "lsp", "models", "bench", "heads")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or of ``only`` (a command's module is imported only when it
    is registered: ``specd complete`` and ``specd lsp`` start without the others' imports)."""
    parser = argparse.ArgumentParser(prog="specd", description="Exact speculative decoding for code completion.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        if only is None or name == only:
            importlib.import_module(f"specd.cli.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv[0] if argv and argv[0] in COMMANDS else None)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (ModelError, RequestError, ConfigError, VocabularyMismatch, UnsupportedDrafter) as e:
        print(f"specd: error: {e}", file=sys.stderr)
        return 2
    except Cancelled:
        print("specd: cancelled", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        print("specd: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
