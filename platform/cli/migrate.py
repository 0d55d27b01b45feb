"""`vigil migrate`: move the database schema to a revision."""

from __future__ import annotations

import argparse
import logging

from vigil.platform.cli.database import make_sqlite_dir
from vigil.platform.cli.flags import Subparsers, add_settings
from vigil.platform.settings import database_url
from vigil.platform.settings.table import Command


def add_parser(sub: Subparsers) -> None:
    mig = sub.add_parser("migrate", help="move the database schema to a revision (head)")
    add_settings(mig, Command.MIGRATE)
    mig.add_argument("--revision", default="head", help="target revision; 'base' empties it")
    mig.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from vigil.platform.control.migrate import current_revision, migrate

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    url = database_url(vars(args))
    make_sqlite_dir(url)
    migrate(url, args.revision)
    print(f"database at revision {current_revision(url) or 'base (empty)'}")
    return 0
