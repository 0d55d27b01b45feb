"""The database a command that manages it (`vigil migrate`, `keys`, `admin`) works on."""

from __future__ import annotations

import sys
from pathlib import Path


def make_sqlite_dir(url: str, say_if_new: bool = False) -> None:
    """SQLite creates the database file, not the folder it lies in. `say_if_new`: a
    command that manages a server's users or keys says when it finds no database where it
    looked (run elsewhere, it would otherwise write to a new, empty one unseen)."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        path = Path(parsed.database)
        if say_if_new and not path.exists():
            print(
                f"vigil: no database at {path}: a new, empty one is made there. A server "
                "uses the one in its own data dir: run this in the folder `vigil serve` runs "
                "in, or pass the same --data-dir (or --database-url).",
                file=sys.stderr,
            )
        path.parent.mkdir(parents=True, exist_ok=True)
