"""A local worker's settings, handed over whole: one JSON value on the child's standard
input (the worker token with them, so it is in no argument or variable of the child).

The gateway composes them once (settings.local_worker_settings); the child decodes the
same frozen record and reads no flags or variables of its own.
"""

from __future__ import annotations

import msgspec

from vigil.platform.settings import WorkerSettings


def encode(settings: WorkerSettings) -> bytes:
    return msgspec.json.encode(settings)


def decode(data: bytes) -> WorkerSettings:
    """msgspec.ValidationError for a value that is not a WorkerSettings."""
    return msgspec.json.decode(data, type=WorkerSettings)
