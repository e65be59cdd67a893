"""The ``specd`` command: one module per subcommand, the shared settings flags in
:mod:`specd.cli.flags`. Everything that parses arguments or prints for a person lives here; the
packages below (daemon, LSP server, bench, engine, models) expose functions and classes only."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from specd.cli import bench, complete, lsp, models, serve
from specd.engine.errors import VocabularyMismatch
from specd.models.errors import ModelError
from specd.requests import Cancelled, RequestError
from specd.schema import ConfigError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specd", description="Exact speculative decoding for code completion.")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in (complete, serve, lsp, models, bench):
        command.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (ModelError, RequestError, ConfigError, VocabularyMismatch) as e:
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
