"""Every handler and dependency of the gateway and the worker is declared the way
Litestar 3 reads it (named dependencies, body and parameter markers): building either
application raises no warning at all. (pyproject's filterwarnings makes any deprecation
from Vigil or about its handlers an error in every other test too.)"""

from __future__ import annotations

import warnings
from pathlib import Path

from prometheus_client import CollectorRegistry

from vigil.platform.app import create_app
from vigil.platform.gateway.tokenizers import TokenizerCache
from vigil.platform.services import build_services
from vigil.platform.settings import EngineSettings, ServeSettings
from vigil.platform.worker.runtime import WorkerRuntime
from vigil.platform.worker.server import build_worker_app


def test_the_gateway_and_the_worker_build_without_a_warning(tmp_path: Path) -> None:
    serve = ServeSettings(data_dir=tmp_path, auth="open")
    services = build_services(serve, "worker-token", tokenizers=TokenizerCache(lambda _: None))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        create_app(services)
        runtime = WorkerRuntime(EngineSettings(device="cpu"))
        build_worker_app(runtime, "worker-token", CollectorRegistry())
