"""The links alerts carry: absolute on the gateway's external URL (or its listen
address), and every runbook they name is a page the gateway serves."""

from __future__ import annotations

import socket

from litestar import Litestar
from litestar.testing import AsyncTestClient

from vigil.platform.alerts.links import public_base_url, with_absolute_links
from vigil.platform.api.runbooks import runbook, runbook_names
from vigil.platform.control.alerts.records import RUNBOOK_OF_DECISION, RUNBOOK_OF_SLI
from vigil.platform.slo.sli import ALERTING
from vigil.platform.wire.errors import EXCEPTION_HANDLERS


def test_the_external_url_is_the_base_and_the_listen_address_stands_in_for_it() -> None:
    assert public_base_url("https://vigil.example.com/", "0.0.0.0", 8000) == (
        "https://vigil.example.com"
    )
    assert public_base_url("", "127.0.0.1", 8000) == "http://127.0.0.1:8000"
    assert public_base_url("", "::1", 8001) == "http://[::1]:8001"
    # A wildcard address is nowhere a person can open: the host's name instead.
    assert public_base_url("", "0.0.0.0", 8000) == f"http://{socket.gethostname()}:8000"


def test_paths_are_joined_and_absolute_links_are_kept() -> None:
    alert = {
        "generatorURL": "/console/decisions",
        "annotations": {"summary": "s", "runbook_url": "/runbooks/slo-burn"},
    }
    joined = with_absolute_links(alert, "https://ops.example/vigil")
    assert joined["generatorURL"] == "https://ops.example/vigil/console/decisions"
    assert joined["annotations"] == {
        "summary": "s",
        "runbook_url": "https://ops.example/vigil/runbooks/slo-burn",
    }
    assert alert["generatorURL"] == "/console/decisions"  # the stored payload is untouched
    kept = with_absolute_links({"generatorURL": "https://elsewhere/x"}, "https://ops.example")
    assert kept["generatorURL"] == "https://elsewhere/x"


def test_every_runbook_an_alert_of_vigil_names_exists() -> None:
    names = set(runbook_names())
    assert {RUNBOOK_OF_SLI[sli.value] for sli in ALERTING} <= names
    assert set(RUNBOOK_OF_DECISION.values()) <= names


async def test_the_gateway_serves_a_runbook_and_names_them_all_for_an_unknown_one() -> None:
    app = Litestar([runbook], exception_handlers=EXCEPTION_HANDLERS)
    async with AsyncTestClient(app) as client:
        page = await client.get("/runbooks/worker-down")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/markdown")
        assert page.text.startswith("# VigilWorkerDown")
        missing = await client.get("/runbooks/worker-gone")
        assert missing.status_code == 404
        assert "worker-down" in missing.json()["error"]["message"]
        escaping = await client.get("/runbooks/..%2F..%2Fpyproject")
        assert escaping.status_code == 404
