"""Settings, composed once at start-up from command-line flags and VIGIL_* variables
(table.py declares each; compose.py composes the records of records.py).

Nothing below this package reads the environment: the frozen records built here are
passed down. A flag beats its variable, which beats the default.
"""

from vigil.platform.settings.compose import (
    SettingsError,
    database_url,
    local_worker_engine,
    local_worker_settings,
    plan_gateway,
    serve_settings,
    worker_settings,
)
from vigil.platform.settings.records import (
    DEFAULT_CPU_KV_BYTES,
    DEFAULT_CUDA_KV_FRACTION,
    EdgeSettings,
    EngineSettings,
    ServeSettings,
    TraceSettings,
    WorkerSettings,
    sqlite_url,
)
from vigil.platform.settings.values import parse_bytes

__all__ = [
    "DEFAULT_CPU_KV_BYTES",
    "DEFAULT_CUDA_KV_FRACTION",
    "EdgeSettings",
    "EngineSettings",
    "ServeSettings",
    "SettingsError",
    "TraceSettings",
    "WorkerSettings",
    "database_url",
    "local_worker_engine",
    "local_worker_settings",
    "parse_bytes",
    "plan_gateway",
    "serve_settings",
    "sqlite_url",
    "worker_settings",
]
