"""`vigil`: the command line, one module a command (serve, worker, migrate, keys, admin,
plan). Each composes its settings once (platform/settings) and runs."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from vigil.platform.cli import admin, keys, migrate, plan, serve, worker
from vigil.platform.settings import SettingsError

COMMANDS = (serve, worker, migrate, keys, admin, plan)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vigil", description="Vigil: observability-first model serving."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.run(args)
    except SettingsError as exc:
        print(f"vigil: {exc}", file=sys.stderr)
        return 2
    return code
