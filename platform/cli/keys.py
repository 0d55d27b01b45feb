"""`vigil keys`: create, list and revoke API keys."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from vigil.engine.request import Priority
from vigil.platform.cli.database import make_sqlite_dir
from vigil.platform.cli.flags import Subparsers, add_settings
from vigil.platform.settings import database_url
from vigil.platform.settings.table import Command

if TYPE_CHECKING:
    from vigil.platform.control.access.records import ApiKeyRecord


def add_parser(sub: Subparsers) -> None:
    keys = sub.add_parser("keys", help="create, list and revoke API keys")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    create = keys_sub.add_parser("create", help="create a key and print it, once")
    create.add_argument("--name", required=True, help="who or what uses the key (unique)")
    create.add_argument(
        "--priority",
        choices=[p.label for p in Priority],
        default="interactive",
        help="the key's request class (interactive)",
    )
    create.add_argument("--models", help="comma-separated deployments it may use (all)")
    create.add_argument("--rate-limit", type=int, help="most requests per minute (no limit)")
    keys_list = keys_sub.add_parser("list", help="list the keys (never the keys themselves)")
    revoke = keys_sub.add_parser("revoke", help="revoke a key; it stops working within seconds")
    revoke.add_argument("name", help="the key's name")
    for p in (create, keys_list, revoke):
        add_settings(p, Command.KEYS)
    keys.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from vigil.platform.control.migrate import migrate
    from vigil.platform.errors import VigilError

    url = database_url(vars(args))
    make_sqlite_dir(url, say_if_new=True)
    migrate(url)
    try:
        return asyncio.run(_run_keys_command(url, args))
    except VigilError as exc:
        print(f"vigil: {exc.message}", file=sys.stderr)
        return 2


async def _run_keys_command(url: str, args: argparse.Namespace) -> int:
    from vigil.platform.control.access.keys import ApiKeyService
    from vigil.platform.control.changes import ChangeFeed
    from vigil.platform.control.db import create_engine, session_factory

    engine = create_engine(url)
    try:
        # Gateways on the same PostgreSQL hear of a revoke at once (control/changes.py).
        service = ApiKeyService(session_factory(engine), ChangeFeed(engine).announce)
        if args.keys_command == "create":
            models = args.models.split(",") if args.models is not None else None
            priority = Priority.from_label(args.priority)
            assert priority is not None, "argparse admits class labels only"
            record, plaintext = await service.create(
                args.name, priority, models, args.rate_limit, actor="cli"
            )
            print(plaintext)
            print(
                f"created API key {record.name!r} ({_describe(record)}); copy the key now: "
                "it will not be shown again (only its hash is stored)",
                file=sys.stderr,
            )
        elif args.keys_command == "list":
            print(_key_table(await service.list()))
        elif args.keys_command == "revoke":
            record = await service.revoke(args.name, actor="cli")
            print(f"revoked API key {record.name!r} ({record.key_prefix}...)")
        else:
            raise AssertionError(f"unhandled keys command {args.keys_command}")
    finally:
        await engine.dispose()
    return 0


def _describe(record: ApiKeyRecord) -> str:
    models = ",".join(sorted(record.models)) if record.models is not None else "all"
    limit = record.rate_limit_per_minute
    rate = f"{limit}/min" if limit is not None else "no rate limit"
    return f"{record.priority.label}, models {models}, {rate}"


def _key_table(records: Sequence[ApiKeyRecord]) -> str:
    if not records:
        return "no API keys (create one with `vigil keys create --name NAME`)"
    header = ("NAME", "PREFIX", "PRIORITY", "MODELS", "RATE/MIN", "CREATED", "REVOKED")
    rows = [header] + [
        (
            r.name,
            r.key_prefix + "...",
            r.priority.label,
            ",".join(sorted(r.models)) if r.models is not None else "all",
            str(r.rate_limit_per_minute) if r.rate_limit_per_minute is not None else "-",
            _utc(r.created_at),
            _utc(r.revoked_at) if r.revoked_at is not None else "-",
        )
        for r in records
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def _utc(ts: datetime) -> str:
    return ts.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")
