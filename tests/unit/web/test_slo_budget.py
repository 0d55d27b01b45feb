"""The SLO page's error budget in words (web/pages/slos.py): a share from 0 to 100%, or
"exhausted since" a time with how far over the budget the window is, never a large
negative percentage."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from consoles import Console

from vigil.engine.request import Priority, RequestClock
from vigil.platform.slo.sli import SLI
from vigil.platform.slo.tracker import SLIStatus
from vigil.platform.telemetry.recorder import Outcome, RequestRecord
from vigil.web.pages.slos import budget_view

NOW = datetime(2026, 12, 4, 22, 50, 0, tzinfo=UTC)


def status(good: int, total: int, exhausted_for_s: float | None = None) -> SLIStatus:
    remaining = 1.0 if total == 0 else 1.0 - ((total - good) / total) / 0.01
    return SLIStatus(SLI.TTFT, 0.99, good, total, remaining, {}, None, None, exhausted_for_s)


def test_an_untouched_or_partly_spent_budget_is_a_share() -> None:
    assert budget_view(status(0, 0), 3600, NOW).text == "100%"
    partly = budget_view(status(995, 1000), 3600, NOW)
    assert partly.text == "50.0%" and not partly.exhausted
    assert partly.explained == "5 bad of 1000 requests in the last 1 h; the objective allows 10.0"


def test_a_spent_budget_says_since_when_instead_of_a_negative_share() -> None:
    # 7777 bad of 10000 at a 99% objective: -7677% left by the raw number.
    spent = budget_view(status(2223, 10000, exhausted_for_s=125.0), 300, NOW)
    assert spent.exhausted and spent.text == "exhausted since 22:47:55 UTC"
    assert "%" not in spent.text and "-" not in spent.text
    assert spent.explained.endswith("(77.8x the budget)")
    assert "in the last 5 min" in spent.explained
    assert budget_view(status(0, 10), 90, NOW).text == "exhausted"  # not yet seen by the loop


async def test_the_slo_page_shows_a_spent_budget_as_exhausted_since(console: Console) -> None:
    slos = console.services.slos
    [name, *_] = slos.deployments()
    for late in [False] * 2 + [True] * 8:
        clock = RequestClock(100.0, 100.0, 100.0 + (30.0 if late else 0.1), 100.2, 100.3)
        slos.record(
            RequestRecord(name, f"{name}@1", Priority.INTERACTIVE, Outcome.LENGTH, 5, 5, clock)
        )
    page = await console.get("/console/slos")
    assert page.status_code == 200
    budget = re.search(
        rf'id="slo-{re.escape(name)}".*?<td class="budget error"[^>]*>([^<]*)<', page.text, re.S
    )
    assert budget and budget.group(1).startswith("exhausted since ")
    assert "-" not in budget.group(1) and "%" not in budget.group(1)
