"""The deployments page: canary weight with a confirm step, promote, roll back, a stale
revision answered with what changed, and no write controls for a viewer."""

from __future__ import annotations

import html
import re

from consoles import Console
from fakes import report_loaded

from vigil.engine.bundled import SMOLLM2
from vigil.platform.control.specs import bundled_version

DEPLOYMENT = SMOLLM2  # seeded: the bundled model under its own name
BUNDLED_VERSION = bundled_version(SMOLLM2).version
BUNDLED_KEY = f"{SMOLLM2}@{BUNDLED_VERSION}"
BASE = f"/console/deployments/{DEPLOYMENT}"


async def ready_version(console: Console, version: str = "v2") -> None:
    plane = console.services.plane
    await plane.versions.register_version(
        SMOLLM2, version, f"bundled:{SMOLLM2}", params={"temperature": 0.2}, actor="test"
    )
    await report_loaded(plane, SMOLLM2, version)


def revision_of(html: str) -> int:
    m = re.search(r'data-revision="(\d+)"', html)
    assert m
    return int(m.group(1))


async def test_a_viewer_sees_no_write_controls_and_a_forged_write_is_403(console: Console) -> None:
    await ready_version(console)
    await console.sign_in("vera")
    page = await console.get("/console/deployments")
    assert page.status_code == 200 and DEPLOYMENT in page.text
    assert "canary-form" not in page.text and "hx-post" not in page.text
    for action, data in [
        ("canary", {"version": "v2", "weight": "10", "revision": "1"}),
        ("promote", {}),
        ("rollback", {}),
    ]:
        forged = await console.post(f"{BASE}/{action}", data)
        assert forged.status_code == 403, action
        assert "'operator' role" in html.unescape(forged.text)
    review = await console.get(f"{BASE}/canary/review", version="v2", weight="10", revision="1")
    assert review.status_code == 403
    for action in ("promote", "rollback"):
        assert (await console.get(f"{BASE}/{action}/review")).status_code == 403
    assert (await console.services.plane.deployments.get(DEPLOYMENT)).spec.canary is None


async def test_an_operator_reviews_then_confirms_a_canary_weight(console: Console) -> None:
    await ready_version(console)
    await console.sign_in("otto")
    page = await console.get("/console/deployments")
    assert "canary-form" in page.text
    revision = revision_of(page.text)
    review = await console.get(
        f"{BASE}/canary/review", version="v2", weight="10", revision=revision
    )
    assert review.status_code == 200
    assert "Send <strong>10%</strong>" in review.text and f"{SMOLLM2}@v2" in review.text
    # Reviewing changed nothing; confirming does.
    assert (await console.services.plane.deployments.get(DEPLOYMENT)).spec.canary is None
    done = await console.post(
        f"{BASE}/canary", {"version": "v2", "weight": "10", "revision": str(revision)}
    )
    assert done.status_code == 200
    assert '<strong class="canary-weight">10%</strong>' in done.text
    assert 'hx-swap-oob="innerHTML"' in done.text and "10% of requests to" in done.text
    spec = (await console.services.plane.deployments.get(DEPLOYMENT)).spec
    assert spec.canary is not None and spec.canary.version == "v2" and spec.canary_weight == 10
    (entry,) = await console.services.plane.audit.list("deployment", DEPLOYMENT, limit=1)
    assert entry.actor == "otto"


def review_cells(text: str) -> tuple[str, str]:
    """The from and to versions a review names."""
    found = re.search(
        r'class="review-from">([^<]+)</td>.*class="review-to">([^<]+)</td>', text, re.S
    )
    assert found, text
    return found.group(1), found.group(2)


async def test_promote_and_roll_back(console: Console) -> None:
    await ready_version(console)
    await ready_version(console, "v3")
    await console.sign_in("otto")
    plane = console.services.plane
    await console.post(f"{BASE}/canary", {"version": "v2", "weight": "50", "revision": "1"})
    review = await console.get(f"{BASE}/promote/review")
    assert review.status_code == 200 and "confirm-promote" in review.text
    assert review_cells(review.text) == (BUNDLED_KEY, f"{SMOLLM2}@v2")
    assert "2 → 3" in html.unescape(review.text) and "review-slis" in review.text
    assert "hx-confirm" not in review.text
    assert (await plane.deployments.get(DEPLOYMENT)).spec.stable.version != "v2"  # reviewed only
    promoted = await console.post(f"{BASE}/promote", {"revision": "2"})
    assert promoted.status_code == 200 and "hx-confirm" not in promoted.text
    assert (await plane.deployments.get(DEPLOYMENT)).spec.stable.version == "v2"
    await console.post(f"{BASE}/canary", {"version": "v3", "weight": "5", "revision": "3"})
    review = await console.get(f"{BASE}/rollback/review")
    assert review_cells(review.text) == (f"{SMOLLM2}@v3", f"{SMOLLM2}@v2")
    assert "the canary is dropped" in review.text
    rolled = await console.post(f"{BASE}/rollback", {"revision": "4"})
    assert rolled.status_code == 200 and "the canary is dropped" in rolled.text
    spec = (await plane.deployments.get(DEPLOYMENT)).spec
    assert spec.canary is None and spec.stable.version == "v2"

    # Without a canary, roll back undoes the promotion: the bundled version is back.
    await report_loaded(plane, SMOLLM2, BUNDLED_VERSION)
    review = await console.get(f"{BASE}/rollback/review")
    assert review_cells(review.text) == (f"{SMOLLM2}@v2", BUNDLED_KEY)
    assert "restores the stable version of revision 2, replaced by otto" in review.text
    rolled = await console.post(f"{BASE}/rollback", {"revision": "5"})
    assert rolled.status_code == 200 and "previous stable version serves again" in rolled.text
    assert (await plane.deployments.get(DEPLOYMENT)).spec.stable.key == BUNDLED_KEY
    (entry,) = await plane.audit.list("deployment", DEPLOYMENT, limit=1)
    assert (entry.actor, entry.action) == ("otto", "deployment.rollback")

    # The card lists the stable versions replaced, newest first, and which came back.
    card = html.unescape((await console.get(f"{BASE}")).text)
    rows = re.findall(r"<tr><td>([^<]+)</td><td>(\d+)</td>\s*<td>[^<]*by (\w+) \(([\w.]+)\)", card)
    assert rows == [
        (f"{SMOLLM2}@v2", "5", "otto", "deployment.rollback"),
        (BUNDLED_KEY, "2", "otto", "deployment.promote"),
    ]
    assert card.count("restored at") == 1 and "stable-history-none" not in card

    nothing = await console.get(f"{BASE}/rollback/review")
    assert nothing.status_code == 200 and "confirm-rollback" not in nothing.text
    assert "no earlier stable version" in nothing.text
    refused = await console.post(f"{BASE}/rollback", {"revision": "6"})
    assert refused.status_code == 409 and "no earlier stable version" in refused.text


async def test_a_stale_revision_is_a_409_that_says_what_changed(console: Console) -> None:
    await ready_version(console)
    await console.sign_in("otto")
    revision = revision_of((await console.get("/console/deployments")).text)
    # Someone else sets a canary meanwhile.
    plane = console.services.plane
    from vigil.platform.control.deployments.records import VersionKey

    await plane.deployments.set_canary(DEPLOYMENT, VersionKey(SMOLLM2, "v2"), 30, actor="ada")
    stale = await console.post(
        f"{BASE}/canary", {"version": "v2", "weight": "10", "revision": str(revision)}
    )
    assert stale.status_code == 409
    assert "changed since this page was drawn" in html.unescape(stale.text)
    assert "ada at" in html.unescape(stale.text) and "canary_weight 0 → 30" in html.unescape(
        stale.text
    )
    assert '<strong class="canary-weight">30%</strong>' in html.unescape(
        stale.text
    )  # the card, redrawn
    assert (await plane.deployments.get(DEPLOYMENT)).spec.canary_weight == 30


async def test_a_version_not_ready_gets_its_reason(console: Console) -> None:
    await console.services.plane.versions.register_version(
        SMOLLM2, "cold", f"bundled:{SMOLLM2}", actor="test"
    )
    await console.sign_in("otto")
    answer = await console.post(
        f"{BASE}/canary", {"version": "cold", "weight": "10", "revision": "1"}
    )
    assert answer.status_code == 409 and "not ready on any worker" in html.unescape(answer.text)
    assert answer.headers["hx-retarget"] == "#flash"


async def test_a_bad_weight_is_a_400_naming_the_field(console: Console) -> None:
    await ready_version(console)
    await console.sign_in("otto")
    answer = await console.post(
        f"{BASE}/canary", {"version": "v2", "weight": "150", "revision": "1"}
    )
    assert answer.status_code == 400 and "'weight' must be from 0 to 100" in html.unescape(
        answer.text
    )
