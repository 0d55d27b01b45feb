"""Every console page and action: what each role sees, what each write does through the
control plane's services, and what it answers when refused."""

from __future__ import annotations

import html
import re

import pytest
from consoles import Console

from vigil.engine.bundled import MINILM, SMOLLM2
from vigil.platform.control.specs import bundled_version
from vigil.platform.wire.worker import Heartbeat, RegisterRequest, SlotLimits, SlotReport, StatsWire

PAGES = [
    "/console/",
    "/console/deployments",
    "/console/versions",
    "/console/slos",
    "/console/alerts",
    "/console/decisions",
    "/console/audit",
    "/console/workers",
]


def text_of(answer: object) -> str:
    return html.unescape(answer.text)  # type: ignore[attr-defined]


@pytest.mark.parametrize("username", ["vera", "otto", "ada"])
async def test_every_page_draws_for_every_role(console: Console, username: str) -> None:
    await console.sign_in(username)
    for path in PAGES:
        page = await console.get(path)
        assert page.status_code == 200, path
        assert f"{username} · " in page.text
    keys = await console.get("/console/keys")
    assert keys.status_code == (200 if username == "ada" else 403)
    nav = (await console.get("/console/")).text
    assert ('href="/console/keys"' in nav) == (username == "ada")


async def test_a_viewer_is_drawn_no_write_control_anywhere(console: Console) -> None:
    await console.sign_in("vera")
    for path in PAGES:
        page = (await console.get(path)).text
        assert "hx-post" not in page, path
        forms = re.findall(r"<form[^>]*>", page)
        signing_out = ('action="/console/logout"', 'action="/console/logout-everywhere"')
        assert all(any(a in f for a in signing_out) or "hx-get" in f for f in forms), path


async def test_register_a_version_with_default_params_then_retire_it(console: Console) -> None:
    await console.sign_in("otto")
    form = {
        "model": SMOLLM2,
        "version": "warm",
        "artifact": f"bundled:{SMOLLM2}",
        "temperature": "0.2",
        "top_p": "0.9",
    }
    answer = await console.post("/console/versions", form)
    assert answer.status_code == 200 and f"Registered {SMOLLM2}@warm" in text_of(answer)
    record = await console.services.plane.versions.get_version(SMOLLM2, "warm")
    assert dict(record.ref.params) == {"temperature": 0.2, "top_p": 0.9}
    assert 'data-key="smollm2-135m-instruct@warm"' in answer.text
    retired = await console.post(f"/console/versions/{SMOLLM2}/warm/retire")
    assert retired.status_code == 200
    assert (await console.services.plane.versions.get_version(SMOLLM2, "warm")).status == "retired"


async def test_a_bad_version_form_is_a_400_that_names_the_field(console: Console) -> None:
    await console.sign_in("otto")
    form = {
        "model": SMOLLM2,
        "version": "hot",
        "artifact": f"bundled:{SMOLLM2}",
        "temperature": "9",
    }
    answer = await console.post("/console/versions", form)
    assert answer.status_code == 400 and "'temperature' must be from 0 to 2" in text_of(answer)
    outside = {"model": SMOLLM2, "version": "x", "artifact": "/etc/passwd"}
    assert (await console.post("/console/versions", outside)).status_code == 400


async def test_versions_show_each_workers_load_and_a_failed_loads_error(console: Console) -> None:
    workers = console.services.workers
    workers.register(RegisterRequest("gpu-1", "http://gpu-1:9001", "cuda", 1 << 30, 1))
    workers.heartbeat(
        "gpu-1",
        Heartbeat(
            [
                SlotReport(bundled_version(SMOLLM2).key, "loading", 0.4),
                SlotReport(bundled_version(MINILM).key, "failed", 0.0, "out of memory"),
            ]
        ),
    )
    table = text_of(await console.get("/console/versions/table"))
    assert "gpu-1: " in table and "40%" in table and "out of memory" in table
    page = text_of(await console.get("/console/workers"))
    assert "gpu-1" in page and "s ago" in page


async def test_the_workers_table_shows_each_engines_waiting_running_and_kv_use(
    console: Console,
) -> None:
    workers = console.services.workers
    workers.register(RegisterRequest("gpu-2", "http://gpu-2:9001", "cuda", 1 << 30, 1))
    stats = StatsWire(
        num_waiting_interactive=2,
        num_waiting_batch=1,
        num_running=4,
        num_kv_blocks_total=200,
        num_kv_blocks_used=50,
        num_kv_blocks_cached=0,
        num_preemptions=0,
        num_prefix_queried_tokens=0,
        num_prefix_hit_tokens=0,
        num_steps=9,
    )
    limits = SlotLimits(max_model_len=2048, kv_capacity_tokens=3200, max_num_seqs=8)
    key = bundled_version(SMOLLM2).key
    workers.heartbeat("gpu-2", Heartbeat([SlotReport(key, "ready", 1.0, None, limits, stats)]))
    table = text_of(await console.get("/console/workers"))
    row = next(r for r in table.split('<tr class="worker">') if "gpu-2" in r)
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
    # Queue (interactive and batch), running, KV used: after the key and its state.
    state_at = next(i for i, c in enumerate(cells) if c == key)
    assert cells[state_at + 2 : state_at + 5] == ["3", "4", "25.0%"], cells


async def test_an_operator_edits_an_slo_and_a_viewer_cannot(console: Console) -> None:
    await console.sign_in("otto")
    form = {
        "ttft_p99_s": "1.5",
        "min_tokens_per_s": "4",
        "availability_target": "0.99",
        "admission_target": "0.95",
        "window_s": "3600",
        "batch_shed_fraction": "0.5",
        "rollback_min_requests": "20",
        "rollback_margin": "0.05",
    }
    saved = await console.post(f"/console/slos/{SMOLLM2}", form)
    assert saved.status_code == 200 and "Saved the SLO" in saved.text
    slo = await console.services.plane.deployments.get_slo(SMOLLM2)
    assert slo.ttft_p99_s == 1.5 and slo.auto_rollback is False and slo.rollback_min_requests == 20
    assert slo.admission_target == 0.95 and 'name="admission_target"' in saved.text
    await console.sign_in("vera")
    assert (await console.post(f"/console/slos/{SMOLLM2}", form)).status_code == 403


async def test_webhooks_show_the_secret_once_send_a_test_and_log_it(console: Console) -> None:
    await console.sign_in("otto")
    form = {"name": "oncall", "url": "http://127.0.0.1:9/hook", "events": ["slo.burn", "shed"]}
    created = await console.post("/console/alerts/webhooks", form)
    assert created.status_code == 200
    secret = re.search(r'<div class="secret">([^<]+)</div>', created.text)
    assert secret is not None
    page = await console.get("/console/alerts")
    assert "oncall" in page.text and secret.group(1) not in page.text
    test = await console.post("/console/alerts/webhooks/oncall/test")
    assert test.status_code == 200 and "A test event is on its way" in test.text
    off = await console.post("/console/alerts/webhooks/oncall/enabled", {"enabled": "false"})
    assert (
        off.status_code == 200 and not (await console.services.plane.webhooks.get("oncall")).enabled
    )
    log = await console.get("/console/alerts/webhooks/oncall/deliveries")
    assert log.status_code == 200 and "Delivery log of oncall" in log.text
    deleted = await console.post("/console/alerts/webhooks/oncall/delete")
    assert deleted.status_code == 200 and "No webhooks" in deleted.text


async def test_a_webhook_to_a_metadata_address_is_refused(console: Console) -> None:
    await console.sign_in("otto")
    form = {"name": "steal", "url": "http://169.254.169.254/latest", "events": ["shed"]}
    assert (await console.post("/console/alerts/webhooks", form)).status_code == 400


async def test_decisions_are_listed_with_their_numbers_and_filtered(console: Console) -> None:
    alerts = console.services.plane.alerts
    await alerts.decide(SMOLLM2, "shed_batch", "on", "page burn", {"burn_rate_5m": 20.5})
    await alerts.decide(SMOLLM2, "fallback", "on", "still burning", {"burn_rate_1h": 15.0})
    page = text_of(await console.get("/console/decisions"))
    assert "page burn" in page and "burn_rate_5m" in page and "still burning" in page
    only = await console.client.get(
        "/console/decisions", params={"kind": "fallback"}, headers={"hx-request": "true"}
    )
    assert only.text.lstrip().startswith('<div id="decision-rows"')
    assert "still burning" in only.text and "page burn" not in only.text


async def test_the_audit_log_filters_and_hides_users_and_keys_from_non_admins(
    console: Console,
) -> None:
    await console.sign_in("ada")
    await console.post("/console/keys", {"name": "ci"})
    await console.sign_in("vera")
    page = text_of(await console.get("/console/audit"))
    assert "key ci" not in page and "user.sign_in" not in page
    await console.sign_in("ada")
    page = text_of(await console.get("/console/audit", entity_type="key"))
    assert "key ci" in page and "deployment.create" not in page
    by_actor = text_of(await console.get("/console/audit", actor="system"))
    assert "deployment.create" in by_actor and "key.create" not in by_actor


async def test_an_admin_creates_a_key_sees_it_once_and_revokes_it(console: Console) -> None:
    await console.sign_in("ada")
    created = await console.post("/console/keys", {"name": "app", "priority": "batch"})
    assert created.status_code == 200
    key = re.search(r'<div class="secret">(vgl_[^<]+)</div>', created.text)
    assert key is not None
    found = await console.services.plane.keys.find(key.group(1))
    assert found is not None and found.name == "app"
    assert key.group(1) not in (await console.get("/console/keys")).text
    revoked = await console.post("/console/keys/app/revoke")
    assert revoked.status_code == 200 and "revoked" in revoked.text
    assert await console.services.plane.keys.find(key.group(1)) is None


async def test_an_operator_cannot_create_a_key(console: Console) -> None:
    await console.sign_in("otto")
    assert (await console.post("/console/keys", {"name": "sneaky"})).status_code == 403
    assert await console.services.plane.keys.list() == []
