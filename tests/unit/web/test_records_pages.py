"""Audit and Decisions as one reads them: each audit row the fields that changed (the
whole record behind <details>), pages with a link to the older ones, and the filters
the admin API's lists take, a wrong one answered 400 with what is valid."""

from __future__ import annotations

import html
import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from consoles import Console

from vigil.engine.bundled import SMOLLM2
from vigil.platform.control.specs import SLOTargets
from vigil.web.snapshots import FieldChange, changed_fields


def text_of(answer: object) -> str:
    return html.unescape(answer.text)  # type: ignore[attr-defined]


def test_only_changed_fields_by_their_path() -> None:
    before = {"name": "chat", "max_tokens": None, "slo": {"ttft_p99_s": 5.0, "window_s": 60}}
    after = {"name": "chat", "max_tokens": 99, "slo": {"ttft_p99_s": 2.5, "window_s": 60}}
    assert changed_fields(before, after) == [
        FieldChange("max_tokens", "null", "99"),
        FieldChange("slo.ttft_p99_s", "5.0", "2.5"),
    ]
    created = changed_fields(None, {"name": "chat", "limits": {"batch": {"max_queue": 4}}})
    assert created == [
        FieldChange("limits.batch.max_queue", "—", "4"),
        FieldChange("name", "—", "chat"),
    ]


async def test_an_audit_row_shows_what_changed_and_the_whole_record_on_demand(
    console: Console,
) -> None:
    plane = console.services.plane
    record = await plane.deployments.get(SMOLLM2)
    await plane.deployments.update(
        SMOLLM2, replace(record.draft, max_tokens=99), revision=1, actor="ada"
    )
    await plane.deployments.set_slo(SMOLLM2, SLOTargets(ttft_p99_s=2.5), actor="ada")
    await console.sign_in("otto")
    page = text_of(await console.get("/console/audit", entity_type="deployment"))
    slo, update = page.split('<tr class="audit-entry"')[1:3]
    assert "deployment.slo" in slo
    assert re.search(r'diff-field">slo.ttft_p99_s</td><td class="diff-before">5.0</td>'
                     r'<td class="diff-after">2.5</td>', slo)  # fmt: skip
    assert "slo.window_s" not in slo.split("<details")[0]  # unchanged: not in the diff
    assert "deployment.update" in update
    diff, whole = update.split("<details")
    changed = re.findall(r'diff-field">([^<]+)</td>', diff)
    assert changed == ["max_tokens", "revision"]
    assert '"limits"' in whole and '"max_tokens": 99' in whole  # the whole record


async def test_audit_pages_link_to_the_older_entries(console: Console) -> None:
    for i in range(5):
        await console.services.plane.audit.record("ada", "user.note", "user", f"u{i}", {})
    await console.sign_in("ada")
    seen: list[str] = []
    url = "/console/audit?entity_type=user&action=user.note&limit=2"
    for _ in range(3):
        page = text_of(await console.client.get(url))
        seen += re.findall(r"user (u\d)</td>", page)
        older = re.search(r'<a class="older" rel="next" href="([^"]+)"', page)
        if older is None:
            break
        url = older.group(1)
        assert "entity_type=user" in url and "limit=2" in url and "before=" in url
    assert seen == ["u4", "u3", "u2", "u1", "u0"]
    assert "No older entries." in page and 'class="newest"' in page


async def test_audit_filters_by_action_actor_and_time(console: Console) -> None:
    await console.sign_in("ada")
    audit = console.services.plane.audit
    await audit.record("ada", "user.note", "user", "n1", {})
    await audit.record("otto", "user.note", "user", "n2", {})
    page = text_of(await console.get("/console/audit", action="user.note", actor="otto"))
    assert "user n2" in page and "user n1" not in page
    soon = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    later = text_of(await console.get("/console/audit", since=soon))
    assert "Nothing matches." in later
    earlier = text_of(await console.get("/console/audit", until=soon, action="user.note"))
    assert "user n1" in earlier and "user n2" in earlier


async def test_a_wrong_filter_is_a_400_that_lists_what_is_valid(console: Console) -> None:
    await console.sign_in("otto")
    for path, params, message in [
        ("/console/audit", {"min_duration_ms": "5"}, "unknown filter 'min_duration_ms'; this "
         "list takes action, actor, before, entity_name, entity_type, limit, since, until"),
        ("/console/audit", {"entity_type": "robot"}, "entity_type must be one of deployment, "
         "key, model, user, version, webhook; got 'robot'"),
        ("/console/audit", {"since": "yesterday"}, "since must be an ISO 8601 time"),
        ("/console/decisions", {"kind": "panic"}, "kind must be one of shed_batch, fallback, "
         "rollback, shadow, alert, worker"),
        ("/console/decisions", {"actor": "x"}, "unknown filter 'actor'"),
    ]:  # fmt: skip
        answer = await console.client.get(path, params=params)
        assert answer.status_code == 400 and message in text_of(answer), (params, answer.text)


async def test_decisions_page_and_filter_by_time(console: Console) -> None:
    alerts = console.services.plane.alerts
    for i in range(3):
        await alerts.decide(SMOLLM2, "shed_batch", "on", f"burn {i}", {"burn_rate_5m": 20.5 + i})
    await console.sign_in("vera")
    page = text_of(await console.get("/console/decisions", limit=2))
    assert "burn 2" in page and "burn 1" in page and "burn 0" not in page
    assert 'diff-field">burn_rate_5m</td><td>22.5</td>' in page
    assert "<details" in page and 'rel="next"' in page
    older = re.search(r'rel="next" href="([^"]+)"', page)
    assert older is not None
    rest = text_of(await console.client.get(older.group(1)))
    assert "burn 0" in rest and "burn 2" not in rest
