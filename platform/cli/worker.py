"""`vigil worker`: engines for one or more gateways, on this machine or another, from
its own flags and variables (`vigil serve`'s local workers are handed theirs whole:
worker/local.py)."""

from __future__ import annotations

import argparse

from vigil.platform.cli.flags import Subparsers, add_settings
from vigil.platform.settings import worker_settings
from vigil.platform.settings.table import Command


def add_parser(sub: Subparsers) -> None:
    worker = sub.add_parser(
        "worker", help="run engines for a gateway (its token in VIGIL_WORKER_TOKEN)"
    )
    add_settings(worker, Command.WORKER)
    worker.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from vigil.platform.worker.server import run_worker

    run_worker(worker_settings(vars(args)))
    return 0
