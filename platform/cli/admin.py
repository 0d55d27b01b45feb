"""`vigil admin create`: a user of the console and the admin API."""

from __future__ import annotations

import argparse
import asyncio
import sys

from vigil.platform.cli.database import make_sqlite_dir
from vigil.platform.cli.flags import Subparsers, add_settings
from vigil.platform.cli.password import read_password
from vigil.platform.settings import database_url
from vigil.platform.settings.table import Command


def add_parser(sub: Subparsers) -> None:
    admin = sub.add_parser("admin", help="manage the users of the console and the admin API")
    admin_sub = admin.add_subparsers(dest="admin_command", required=True, metavar="ACTION")
    user = admin_sub.add_parser("create", help="create a user (the first admin, typically)")
    user.add_argument("--username", required=True, help="the name to sign in with")
    user.add_argument(
        "--role",
        choices=["admin", "operator", "viewer"],
        default="admin",
        help="admin (default): everything; operator: deploy and tune; viewer: read",
    )
    user.add_argument(
        "--password-stdin",
        action="store_true",
        help="read the password from the first line of standard input instead of a prompt",
    )
    add_settings(user, Command.ADMIN)
    admin.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from vigil.platform.control.migrate import migrate
    from vigil.platform.errors import VigilError

    try:
        password = read_password(args.password_stdin)
    except ValueError as exc:
        print(f"vigil: {exc}", file=sys.stderr)
        return 2
    url = database_url(vars(args))
    make_sqlite_dir(url, say_if_new=True)
    migrate(url)
    try:
        return asyncio.run(_create_user(url, args.username, password, args.role))
    except VigilError as exc:
        print(f"vigil: {exc.message}", file=sys.stderr)
        return 2


async def _create_user(url: str, username: str, password: str, role: str) -> int:
    from vigil.platform.control.access.records import Role
    from vigil.platform.control.access.users import UserService
    from vigil.platform.control.db import create_engine, session_factory

    engine = create_engine(url)
    try:
        users = UserService(session_factory(engine))
        user = await users.create(username, password, Role(role), actor="cli")
    finally:
        await engine.dispose()
    print(f"created {user.role} {user.username!r}; sign in to the console or the admin API")
    return 0
