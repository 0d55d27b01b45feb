"""The control plane on a SQLite database migrated to head: versions with checksums,
deployments with revisions, canaries, validation, audit rows, the serving view, the
bundled seed and the deployments file."""

from __future__ import annotations

import asyncio
import re
import shutil
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest
from argon2 import PasswordHasher
from fakes import report_loaded
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from vigil.engine.artifacts import artifact_checksum
from vigil.engine.bundled import MINILM, SMOLLM2, ModelFormat, ModelKind, bundled_source
from vigil.engine.request import Priority
from vigil.platform.control.access.records import Role
from vigil.platform.control.db import create_engine, session_factory
from vigil.platform.control.deployments import service as deployments_module
from vigil.platform.control.deployments.config_file import load_declarations
from vigil.platform.control.deployments.records import DeploymentDraft, VersionKey
from vigil.platform.control.migrate import migrate
from vigil.platform.control.plane import ControlPlane
from vigil.platform.control.replicas import service as replicas_service
from vigil.platform.control.replicas.records import ReplicaReport, ReplicaStatus
from vigil.platform.control.specs import (
    ClassLimits,
    FallbackSpec,
    FallbackTrigger,
    SLOTargets,
    bundled_version,
)
from vigil.platform.control.versions.records import VersionStatus
from vigil.platform.control.webhooks.records import WebhookEvent
from vigil.platform.control.webhooks.tables import OutboxMessage
from vigil.platform.errors import Conflict, InvalidRequest, NotFound
from vigil.platform.loops import worker_lost

BUNDLED = bundled_version(SMOLLM2)
STABLE = VersionKey(SMOLLM2, BUNDLED.version)
WARM = VersionKey(SMOLLM2, "warm")
MINILM_KEY = VersionKey(MINILM, bundled_version(MINILM).version)
# Argon2 at its cheapest: these tests are about the rules, not the hash's cost.
FAST_HASHER = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)


def new_plane(path: Path) -> tuple[ControlPlane, AsyncEngine]:
    """A plane whose model directory is the database's folder (the test's tmp_path)."""
    engine = create_engine(f"sqlite+aiosqlite:///{path}")
    plane = ControlPlane(
        session_factory(engine), password_hasher=FAST_HASHER, model_dirs=[path.parent]
    )
    return plane, engine


@pytest.fixture(scope="module")
def seeded_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One database at head with the bundled models seeded; each test gets a copy."""
    path = tmp_path_factory.mktemp("control-template") / "vigil.db"
    migrate(f"sqlite+aiosqlite:///{path}")

    async def seed() -> None:
        plane, engine = new_plane(path)
        await plane.seed_bundled([SMOLLM2, MINILM])
        await engine.dispose()

    asyncio.run(seed())
    return path


@pytest.fixture
def db_path(seeded_db: Path, tmp_path: Path) -> Path:
    return Path(shutil.copy(seeded_db, tmp_path / "vigil.db"))


@pytest.fixture
async def plane(db_path: Path) -> AsyncIterator[ControlPlane]:
    plane, engine = new_plane(db_path)
    try:
        yield plane
    finally:
        await engine.dispose()


async def register_warm(plane: ControlPlane, loaded: bool = True) -> None:
    """Version 'warm' registered and (unless `loaded` is False) ready on a worker."""
    await plane.versions.register_version(
        SMOLLM2, "warm", "bundled:" + SMOLLM2, params={"temperature": 0.7}, actor="alice"
    )
    if loaded:
        await report_loaded(plane, SMOLLM2, "warm")


# ---- seeding and the serving view


async def test_seed_registers_bundled_versions_and_deploys_each_model(
    plane: ControlPlane,
) -> None:
    versions = {v.ref.key: v for v in await plane.versions.list_versions()}
    smol, mini = versions[BUNDLED.key], versions[bundled_version(MINILM).key]
    assert smol.ref.artifact == "bundled:" + SMOLLM2 and smol.status is VersionStatus.REGISTERED
    assert smol.ref.checksum == artifact_checksum(bundled_source(SMOLLM2).path)
    assert mini.ref.kind is ModelKind.EMBED and mini.ref.format is ModelFormat.HF
    assert mini.ref.checksum == artifact_checksum(bundled_source(MINILM).path)

    spec, embedder = sorted(await plane.serving_view(), key=lambda d: d.name != SMOLLM2)
    assert spec.name == SMOLLM2
    assert (embedder.name, embedder.stable.key) == (MINILM, mini.ref.key)
    assert spec.stable == replace(BUNDLED, checksum=smol.ref.checksum)
    assert (spec.canary, spec.canary_weight, spec.fallback) == (None, 0, None)
    assert spec.limits[Priority.INTERACTIVE] == ClassLimits(64, 30.0)
    assert spec.slo == SLOTargets()


async def test_seed_bundled_is_idempotent(plane: ControlPlane) -> None:
    before = await plane.audit.list(limit=1000)
    await plane.seed_bundled([SMOLLM2, MINILM])
    assert await plane.audit.list(limit=1000) == before
    assert len(await plane.serving_view()) == 2


async def test_an_embedding_model_no_deployment_serves_gets_one_at_start(
    tmp_path: Path,
) -> None:
    """A database that served the embedder without a deployment (or never had it) gets
    one; a generation model is deployed on a new database only."""
    path = tmp_path / "vigil.db"
    await asyncio.to_thread(migrate, f"sqlite+aiosqlite:///{path}")
    plane, engine = new_plane(path)
    try:
        await plane.seed_bundled([SMOLLM2])  # as a database before the embedder was served
        await plane.deployments.create("chat", DeploymentDraft(STABLE), actor="a")
        await plane.seed_bundled([SMOLLM2, MINILM])
        names = {spec.name: spec.stable.key for spec in await plane.serving_view()}
        assert names == {
            SMOLLM2: BUNDLED.key,
            "chat": BUNDLED.key,
            MINILM: bundled_version(MINILM).key,
        }
    finally:
        await engine.dispose()


@pytest.fixture
def empty_db(tmp_path: Path) -> Path:
    path = tmp_path / "empty.db"
    migrate(f"sqlite+aiosqlite:///{path}")
    return path


async def test_seed_deploys_nothing_when_there_are_deployments(empty_db: Path) -> None:
    plane, engine = new_plane(empty_db)
    try:
        await plane.versions.register_model(SMOLLM2, ModelKind.GENERATE, actor="a")
        await plane.versions.register_version(SMOLLM2, "mine", "bundled:" + SMOLLM2, actor="a")
        await plane.deployments.create(
            "chat", DeploymentDraft(VersionKey(SMOLLM2, "mine")), actor="a"
        )
        await plane.seed_bundled([SMOLLM2])
        assert [s.name for s in await plane.serving_view()] == ["chat"]
        versions = [v.ref.version for v in await plane.versions.list_versions(SMOLLM2)]
        assert versions == ["mine", BUNDLED.version]
    finally:
        await engine.dispose()


async def test_serving_view_carries_canary_params_limits_slo_fallback_and_pool(
    plane: ControlPlane,
) -> None:
    await register_warm(plane)
    limits = {
        Priority.INTERACTIVE: ClassLimits(8, 5.0),
        Priority.BATCH: ClassLimits(32, 60.0),
    }
    draft = DeploymentDraft(STABLE, max_prompt_tokens=1024, max_tokens=256, limits=limits)
    await plane.deployments.create("lite", draft, actor="alice")
    fallback = FallbackSpec("lite", FallbackTrigger.PREDICTED_TTFT, 2.0)
    record = await plane.deployments.get(SMOLLM2)
    await plane.deployments.update(
        SMOLLM2, replace(record.draft, fallback=fallback), revision=1, actor="alice"
    )
    await plane.deployments.set_canary(SMOLLM2, WARM, 10, actor="alice")
    await plane.deployments.set_slo(SMOLLM2, SLOTargets(ttft_p99_s=1.5), actor="alice")

    _, lite, chat = await plane.serving_view()  # and the embedder's, first by name
    assert (lite.name, lite.max_prompt_tokens, lite.max_tokens, lite.limits) == (
        "lite",
        1024,
        256,
        limits,
    )
    assert chat.canary is not None and chat.canary.key == f"{SMOLLM2}@warm"
    assert chat.canary.params == (("temperature", 0.7),) and chat.canary_weight == 10
    assert chat.canary.param("temperature") == 0.7
    assert chat.fallback == fallback and chat.slo.ttft_p99_s == 1.5
    assert [v.version for v in chat.versions] == [BUNDLED.version, "warm"]


# ---- versions


async def test_register_version_computes_the_checksum_and_audits(plane: ControlPlane) -> None:
    await register_warm(plane)
    warm = await plane.versions.get_version(SMOLLM2, "warm")
    assert warm.ref.checksum == artifact_checksum(bundled_source(SMOLLM2).path)
    assert warm.ref.format is ModelFormat.GGUF and warm.ref.kind is ModelKind.GENERATE
    (entry,) = await plane.audit.list("version", f"{SMOLLM2}@warm")
    assert (entry.actor, entry.action, entry.before) == ("alice", "version.register", None)
    assert entry.after is not None and entry.after["params"] == {"temperature": 0.7}


async def test_a_given_checksum_is_verified(plane: ControlPlane) -> None:
    actual = artifact_checksum(bundled_source(SMOLLM2).path)
    await plane.versions.register_version(
        SMOLLM2, "ok", "bundled:" + SMOLLM2, checksum=actual.upper(), actor="alice"
    )
    with pytest.raises(InvalidRequest, match="does not match") as caught:
        await plane.versions.register_version(
            SMOLLM2, "bad", "bundled:" + SMOLLM2, checksum="0" * 64, actor="alice"
        )
    assert (caught.value.code, caught.value.param) == ("checksum_mismatch", "checksum")
    assert actual in caught.value.message
    with pytest.raises(NotFound):
        await plane.versions.get_version(SMOLLM2, "bad")
    assert await plane.audit.list("version", f"{SMOLLM2}@bad") == []


async def test_versions_from_a_gguf_file_and_a_hugging_face_folder(
    plane: ControlPlane, tmp_path: Path
) -> None:
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF weights")
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    v1 = await plane.versions.register_version(SMOLLM2, "file", str(gguf), actor="a")
    assert (v1.ref.format, v1.ref.checksum) == (ModelFormat.GGUF, artifact_checksum(gguf))
    await plane.versions.register_model("tiny-bert", ModelKind.EMBED, actor="a")
    v2 = await plane.versions.register_version("tiny-bert", "1", str(folder), actor="a")
    assert (v2.ref.format, v2.ref.checksum) == (ModelFormat.HF, artifact_checksum(folder))


@pytest.mark.parametrize(
    ("model", "version", "artifact", "params", "error", "mentions"),
    [
        ("ghost", "1", "bundled:" + SMOLLM2, {}, NotFound, "no model is named 'ghost'"),
        (SMOLLM2, BUNDLED.version, "bundled:" + SMOLLM2, {}, Conflict, "already registered"),
        (SMOLLM2, "x", "/no/such.gguf", {}, InvalidRequest, "inside the model directories"),
        (SMOLLM2, "x", "bundled:" + MINILM, {}, InvalidRequest, "is a embed model"),
        (SMOLLM2, "x", "bundled:gpt-9", {}, InvalidRequest, "no bundled model"),
        (SMOLLM2, "x y", "bundled:" + SMOLLM2, {}, InvalidRequest, "not a valid name"),
        (SMOLLM2, "x", "bundled:" + SMOLLM2, {"temperature": 3}, InvalidRequest, "0 to 2"),
        (SMOLLM2, "x", "bundled:" + SMOLLM2, {"seed": 1}, InvalidRequest, "params.seed"),
    ],
)
async def test_bad_versions_are_refused_with_what_to_fix(
    plane: ControlPlane,
    model: str,
    version: str,
    artifact: str,
    params: dict[str, object],
    error: type[Exception],
    mentions: str,
) -> None:
    with pytest.raises(error, match=mentions):
        await plane.versions.register_version(model, version, artifact, params=params, actor="a")


async def test_a_version_in_use_cannot_be_retired_and_a_retired_one_not_deployed(
    plane: ControlPlane,
) -> None:
    await register_warm(plane)
    await plane.deployments.set_canary(SMOLLM2, WARM, 5, actor="alice")
    with pytest.raises(Conflict, match=f"still served by deployment.s. {SMOLLM2}"):
        await plane.versions.retire_version(SMOLLM2, "warm", actor="alice")
    await plane.deployments.rollback(SMOLLM2, actor="alice")
    retired = await plane.versions.retire_version(SMOLLM2, "warm", actor="alice")
    assert retired.status is VersionStatus.RETIRED
    with pytest.raises(InvalidRequest, match="is retired"):
        await plane.deployments.set_canary(SMOLLM2, WARM, 5, actor="alice")
    (entry, *_) = await plane.audit.list("version", f"{SMOLLM2}@warm")
    assert entry.action == "version.retire"
    assert entry.before is not None and entry.before["status"] == "ready"
    assert entry.after is not None and entry.after["status"] == "retired"


async def test_worker_reports_update_status_but_keep_a_retired_version_retired(
    plane: ControlPlane,
) -> None:
    path = str(bundled_source(SMOLLM2).path)
    fields = {"model": SMOLLM2, "kind": "generate", "format": "gguf", "source": path}
    await plane.versions.record(version=BUNDLED.version, status=VersionStatus.READY, **fields)
    smol = await plane.versions.get_version(SMOLLM2, BUNDLED.version)
    assert (smol.status, smol.source) == (VersionStatus.READY, path)
    assert smol.ref.artifact == "bundled:" + SMOLLM2  # what was registered stays

    await register_warm(plane)
    await plane.versions.retire_version(SMOLLM2, "warm", actor="a")
    await plane.versions.record(version="warm", status=VersionStatus.LOADING, **fields)
    assert (await plane.versions.get_version(SMOLLM2, "warm")).status is VersionStatus.RETIRED

    await plane.versions.record(version="unseen", status=VersionStatus.FAILED, error="x", **fields)
    unseen = await plane.versions.get_version(SMOLLM2, "unseen")
    assert (unseen.status, unseen.error, unseen.ref.artifact) == (VersionStatus.FAILED, "x", path)


async def test_worker_reports_are_not_admin_writes_and_tell_no_listener(
    plane: ControlPlane,
) -> None:
    told: list[str] = []

    async def listener() -> None:
        told.append("changed")

    plane.add_listener(listener)
    fields = {"model": SMOLLM2, "kind": "generate", "format": "gguf", "source": "/m/smol.gguf"}
    await plane.versions.record(version=BUNDLED.version, status=VersionStatus.READY, **fields)
    await plane.versions.record(version="unseen", status=VersionStatus.LOADING, **fields)
    assert told == []
    await register_warm(plane)
    assert told == ["changed"]


# ---- deployments


async def test_create_and_update_bump_the_revision_and_audit_before_and_after(
    plane: ControlPlane,
) -> None:
    created = await plane.deployments.create(
        "chat", DeploymentDraft(STABLE, max_tokens=128), actor="alice"
    )
    assert created.revision == 1
    updated = await plane.deployments.update(
        "chat", replace(created.draft, max_tokens=256), revision=1, actor="bob"
    )
    assert (updated.revision, updated.spec.max_tokens) == (2, 256)
    assert updated.updated_at >= created.updated_at

    update, create = await plane.audit.list("deployment", "chat")
    assert (create.action, create.actor, create.before) == ("deployment.create", "alice", None)
    assert create.after is not None and create.after["max_tokens"] == 128
    assert create.after["slo"]["ttft_p99_s"] == SLOTargets().ttft_p99_s
    assert (update.action, update.actor) == ("deployment.update", "bob")
    assert update.before is not None and update.after is not None
    assert (update.before["max_tokens"], update.before["revision"]) == (128, 1)
    assert (update.after["max_tokens"], update.after["revision"]) == (256, 2)


async def test_an_update_that_changes_nothing_writes_nothing(plane: ControlPlane) -> None:
    record = await plane.deployments.get(SMOLLM2)
    again = await plane.deployments.update(SMOLLM2, record.draft, revision=1, actor="a")
    assert again.revision == 1
    assert [e.action for e in await plane.audit.list("deployment", SMOLLM2)] == [
        "deployment.create"
    ]


async def test_a_stale_revision_is_a_conflict_naming_the_current_one(
    plane: ControlPlane,
) -> None:
    record = await plane.deployments.get(SMOLLM2)
    await plane.deployments.update(
        SMOLLM2, replace(record.draft, max_tokens=64), revision=1, actor="alice"
    )
    with pytest.raises(Conflict, match="is at revision 2, not 1") as caught:
        await plane.deployments.update(
            SMOLLM2, replace(record.draft, max_tokens=32), revision=1, actor="bob"
        )
    assert caught.value.param == "revision"
    assert (await plane.deployments.get(SMOLLM2)).spec.max_tokens == 64


async def test_a_write_racing_another_between_read_and_write_is_a_conflict(
    plane: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The revision check in the UPDATE itself: another write lands after this one read
    the row (revision 1) and before it writes."""
    check = deployments_module.check_draft
    raced = False

    async def racing_check(*args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        nonlocal raced
        if not raced:
            raced = True
            record = await plane.deployments.get(SMOLLM2)
            await plane.deployments.update(
                SMOLLM2, replace(record.draft, max_tokens=99), revision=1, actor="bob"
            )
        return await check(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(deployments_module, "check_draft", racing_check)
    record = await plane.deployments.get(SMOLLM2)
    with pytest.raises(Conflict, match="changed by someone else"):
        await plane.deployments.update(
            SMOLLM2, replace(record.draft, max_tokens=11), revision=1, actor="alice"
        )
    final = await plane.deployments.get(SMOLLM2)
    assert (final.revision, final.spec.max_tokens) == (2, 99)
    assert len(await plane.audit.list("deployment", SMOLLM2)) == 2  # create, bob's update


async def test_canary_promote_and_rollback(plane: ControlPlane) -> None:
    await register_warm(plane)
    canary = await plane.deployments.set_canary(SMOLLM2, WARM, 10, revision=1, actor="alice")
    assert canary.spec.canary is not None and canary.spec.canary.version == "warm"
    assert (canary.spec.canary_weight, canary.revision) == (10, 2)
    shifted = await plane.deployments.set_weight(SMOLLM2, 50, actor="alice")
    assert shifted.spec.canary_weight == 50

    promoted = await plane.deployments.promote(SMOLLM2, revision=3, actor="alice")
    assert promoted.spec.stable.version == "warm"
    assert (promoted.spec.canary, promoted.spec.canary_weight) == (None, 0)

    await report_loaded(plane, SMOLLM2, STABLE.version)
    await plane.deployments.set_canary(SMOLLM2, STABLE, 5, actor="bob")
    rolled = await plane.deployments.rollback(SMOLLM2, actor="bob")
    assert (rolled.spec.stable.version, rolled.spec.canary, rolled.revision) == ("warm", None, 6)

    actions = [(e.actor, e.action) for e in await plane.audit.list("deployment", SMOLLM2)]
    assert actions[:5] == [
        ("bob", "deployment.rollback"),
        ("bob", "deployment.canary"),
        ("alice", "deployment.promote"),
        ("alice", "deployment.canary_weight"),
        ("alice", "deployment.canary"),
    ]
    promote = (await plane.audit.list("deployment", SMOLLM2))[2]
    assert promote.before is not None and promote.after is not None
    assert (promote.before["stable"], promote.before["canary"]) == (str(STABLE), str(WARM))
    assert (promote.after["stable"], promote.after["canary"]) == (str(WARM), None)


async def test_promote_rollback_and_weights_need_a_canary(plane: ControlPlane) -> None:
    for action in (plane.deployments.promote, plane.deployments.drop_canary):
        with pytest.raises(Conflict, match="has no canary"):
            await action(SMOLLM2, actor="a")
    with pytest.raises(Conflict, match="no earlier stable version") as caught:
        await plane.deployments.rollback(SMOLLM2, actor="a")  # never promoted
    assert caught.value.code == "nothing_to_roll_back"
    with pytest.raises(Conflict, match="has no canary"):
        await plane.deployments.set_weight(SMOLLM2, 20, actor="a")


async def test_unknown_deployments_are_not_found(plane: ControlPlane) -> None:
    with pytest.raises(NotFound, match="no deployment is named 'ghost'"):
        await plane.deployments.promote("ghost", actor="a")
    with pytest.raises(NotFound):
        await plane.deployments.get_slo("ghost")


@pytest.mark.parametrize(
    ("draft", "param", "mentions"),
    [
        (DeploymentDraft(VersionKey(SMOLLM2, "nope")), "version", "not registered; versions"),
        (DeploymentDraft(MINILM_KEY, canary=WARM), "canary.version", "stable version's kind"),
        (DeploymentDraft(MINILM_KEY, max_tokens=5), "max_tokens", "generation deployments only"),
        (DeploymentDraft(STABLE, canary=MINILM_KEY), "canary.version", "stable version's kind"),
        (
            DeploymentDraft(STABLE, fallback=FallbackSpec(MINILM, FallbackTrigger.QUEUE_WAIT, 1)),
            "fallback.deployment",
            "serves an embedding model",
        ),
        (DeploymentDraft(STABLE, canary=STABLE), "canary.version", "already the stable"),
        (DeploymentDraft(STABLE, canary=WARM, canary_weight=101), "canary.weight", "0 to 100"),
        (DeploymentDraft(STABLE, canary_weight=5), "canary.weight", "needs a canary version"),
        (DeploymentDraft(STABLE, max_tokens=0), "max_tokens", "at least 1"),
        (
            DeploymentDraft(STABLE, fallback=FallbackSpec("ghost", FallbackTrigger.QUEUE_WAIT, 1)),
            "fallback.deployment",
            "'ghost' does not exist",
        ),
        (
            DeploymentDraft(STABLE, fallback=FallbackSpec("new", FallbackTrigger.QUEUE_WAIT, 1)),
            "fallback.deployment",
            "cannot fall back to itself",
        ),
        (
            DeploymentDraft(STABLE, fallback=FallbackSpec(SMOLLM2, FallbackTrigger.QUEUE_WAIT, 0)),
            "fallback.threshold_s",
            "above 0",
        ),
        (
            DeploymentDraft(
                STABLE,
                limits={
                    Priority.INTERACTIVE: ClassLimits(1, 0.0),
                    Priority.BATCH: ClassLimits(1, 1.0),
                },
            ),
            "limits.interactive",
            "max_queue_wait_s > 0",
        ),
    ],
)
async def test_invalid_drafts_are_refused_naming_the_field(
    plane: ControlPlane, draft: DeploymentDraft, param: str, mentions: str
) -> None:
    await register_warm(plane)
    with pytest.raises(InvalidRequest, match=mentions) as caught:
        await plane.deployments.create("new", draft, actor="a")
    assert caught.value.param == param
    assert [s.name for s in await plane.serving_view()] == [MINILM, SMOLLM2]


async def test_names_are_unique_and_well_formed(plane: ControlPlane) -> None:
    with pytest.raises(Conflict, match="already exists"):
        await plane.deployments.create(SMOLLM2, DeploymentDraft(STABLE), actor="a")
    with pytest.raises(InvalidRequest, match="not a valid name"):
        await plane.deployments.create("has space", DeploymentDraft(STABLE), actor="a")


async def test_slo_targets_are_validated_and_audited(plane: ControlPlane) -> None:
    assert await plane.deployments.get_slo(SMOLLM2) == SLOTargets()
    target = SLOTargets(ttft_p99_s=1.0, availability_target=0.99, window_s=600)
    assert await plane.deployments.set_slo(SMOLLM2, target, actor="ops") == target
    assert await plane.deployments.get_slo(SMOLLM2) == target
    with pytest.raises(InvalidRequest, match="availability_target must be between 0 and 1"):
        await plane.deployments.set_slo(SMOLLM2, SLOTargets(availability_target=1.5), actor="o")
    (entry, _) = await plane.audit.list("deployment", SMOLLM2)
    assert entry.action == "deployment.slo" and entry.actor == "ops"
    assert entry.before is not None and entry.before["slo"]["ttft_p99_s"] == 5.0
    assert entry.after is not None and entry.after["slo"]["window_s"] == 600


# ---- webhooks, users, keys, audit, replicas, listeners


async def test_webhook_secret_is_returned_once_and_never_audited(plane: ControlPlane) -> None:
    record, secret = await plane.webhooks.create(
        "oncall", "https://hooks.example/x", ["slo.burn", "shed"], actor="ops"
    )
    assert secret.startswith("whsec_") and record.secret_hint == "..." + secret[-4:]
    assert record.events == (WebhookEvent.SHED, WebhookEvent.SLO_BURN)
    updated = await plane.webhooks.update("oncall", enabled=False, actor="ops")
    assert not updated.enabled
    assert await plane.webhooks.targets(WebhookEvent.SHED) == []
    await plane.webhooks.update("oncall", enabled=True, actor="ops")
    (target,) = await plane.webhooks.targets(WebhookEvent.SLO_BURN)
    assert target.secret == secret
    await plane.webhooks.delete("oncall", actor="ops")
    assert await plane.webhooks.list() == []
    entries = await plane.audit.list("webhook", "oncall")
    assert [e.action for e in entries] == [
        "webhook.delete",
        "webhook.update",
        "webhook.update",
        "webhook.create",
    ]
    assert entries[0].after is None and entries[-1].before is None
    assert all(secret not in str(e) for e in entries)
    with pytest.raises(InvalidRequest, match="unknown event"):
        await plane.webhooks.create("x", "https://h.example", ["slo.bunr"], actor="ops")
    with pytest.raises(InvalidRequest, match="not a webhook URL"):
        await plane.webhooks.create("x", "ftp://h.example", ["shed"], actor="ops")


async def test_users_authenticate_with_argon2_and_can_be_disabled(plane: ControlPlane) -> None:
    await plane.users.create("root", "correct horse", Role.ADMIN, actor="cli")
    user = await plane.users.authenticate("root", "correct horse")
    assert user is not None and user.role is Role.ADMIN and user.may(Role.OPERATOR)
    assert await plane.users.authenticate("root", "wrong horse") is None
    assert await plane.users.authenticate("nobody", "correct horse") is None

    await plane.users.create("ann", "ann's password", actor="root")
    ann = await plane.users.set_role("ann", Role.OPERATOR, actor="root")
    assert ann.may(Role.OPERATOR) and not ann.may(Role.ADMIN)
    assert await plane.users.authenticate("ann", "ann's password") is not None
    await plane.users.disable("ann", actor="root")
    assert await plane.users.authenticate("ann", "ann's password") is None  # cache dropped

    with pytest.raises(Conflict, match="last active admin"):
        await plane.users.set_role("root", Role.VIEWER, actor="root")
    with pytest.raises(InvalidRequest, match="8 to 1024 characters"):
        await plane.users.create("bob", "short", actor="root")
    with pytest.raises(Conflict, match="already exists"):
        await plane.users.create("ann", "long enough", actor="root")
    actions = [e.action for e in await plane.audit.list("user", "ann")]
    assert actions == ["user.update", "user.update", "user.create"]


async def test_stored_passwords_are_argon2id_hashes(plane: ControlPlane, db_path: Path) -> None:
    await plane.users.create("root", "correct horse", Role.ADMIN, actor="cli")
    with sqlite3.connect(db_path) as conn:  # the stored row, as an attacker sees it
        (stored,) = conn.execute("SELECT password_hash FROM users").fetchone()
    assert stored.startswith("$argon2id$") and "correct horse" not in stored


async def test_authentication_is_cached_so_basic_auth_skips_argon2(db_path: Path) -> None:
    calls = 0

    class CountingHasher(PasswordHasher):
        def verify(self, hash: str | bytes, password: str | bytes) -> bool:
            nonlocal calls
            calls += 1
            return super().verify(hash, password)

    engine = create_engine(f"sqlite+aiosqlite:///{db_path}")
    hasher = CountingHasher(time_cost=1, memory_cost=1024, parallelism=1)
    plane = ControlPlane(session_factory(engine), password_hasher=hasher)
    try:
        await plane.users.create("root", "correct horse", Role.ADMIN, actor="cli")
        for _ in range(5):
            assert await plane.users.authenticate("root", "correct horse") is not None
        assert calls == 1
        assert await plane.users.authenticate("root", "not the password") is None
        assert calls == 2
    finally:
        await engine.dispose()


async def test_keys_created_and_revoked_through_the_plane_are_audited(
    plane: ControlPlane,
) -> None:
    _, plaintext = await plane.keys.create("ci", Priority.BATCH, actor="root")
    assert plaintext.startswith("vgl_")
    await plane.keys.revoke("ci", actor="root")
    with pytest.raises(Conflict, match="already revoked"):
        await plane.keys.revoke("ci", actor="root")
    with pytest.raises(NotFound, match="no API key is named"):
        await plane.keys.revoke("ghost", actor="root")
    revoke, create = await plane.audit.list("key", "ci")
    assert (create.action, revoke.action) == ("key.create", "key.revoke")
    assert revoke.before is not None and revoke.after is not None
    assert (revoke.before["revoked"], revoke.after["revoked"]) == (False, True)
    assert all(plaintext not in str(e) for e in (create, revoke))


async def test_audit_log_is_newest_first_filtered_and_limited(plane: ControlPlane) -> None:
    everything = await plane.audit.list()
    assert [e.id for e in everything] == sorted((e.id for e in everything), reverse=True)
    assert {e.actor for e in everything} == {"system"}
    (newest,) = await plane.audit.list(limit=1)
    assert newest == everything[0]
    models = await plane.audit.list(entity_type="model")
    assert {e.entity_name for e in models} == {SMOLLM2, MINILM}
    with pytest.raises(InvalidRequest, match="limit must be between 1 and 1000"):
        await plane.audit.list(limit=0)


async def test_replicas_upsert_on_register_and_heartbeat(plane: ControlPlane) -> None:
    report = ReplicaReport("w1", "10.0.0.1:9000", "cuda:0", 80 << 30, (BUNDLED.key,))
    first = await plane.replicas.register(report)
    beat = await plane.replicas.heartbeat(replace(report, stats={"num_running": 3}))
    assert beat.registered_at == first.registered_at
    assert beat.last_heartbeat_at >= first.last_heartbeat_at
    assert beat.stats == {"num_running": 3} and beat.versions == (BUNDLED.key,)
    await plane.replicas.heartbeat(replace(report, id="w2"))  # unknown: added
    assert await plane.replicas.mark_silent_down(3600) == []
    down = await plane.replicas.mark_down("w1")
    assert down is not None and down.status is ReplicaStatus.DOWN
    assert await plane.replicas.mark_down("ghost") is None
    assert [(r.id, r.status) for r in await plane.replicas.list()] == [
        ("w1", ReplicaStatus.DOWN),
        ("w2", ReplicaStatus.UP),
    ]


async def test_a_silent_worker_is_marked_down_once_told_and_later_forgotten(
    plane: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sweep every gateway runs: a silent worker is marked down by one call only (a
    second sweep, as another gateway's, finds nothing), becomes a worker.down decision
    sent to the webhooks that asked, unless it was draining; down an hour, it is gone."""
    await plane.webhooks.create("pager", "https://hooks.example/", ["worker.down"], actor="o")
    lost = ReplicaReport("lost-1", "10.0.0.7:9000", "cpu", 1 << 30, (BUNDLED.key,))
    await plane.replicas.register(lost)
    await plane.replicas.register(
        replace(lost, id="leaving-1", status=ReplicaStatus.DRAINING, versions=())
    )
    assert await plane.replicas.mark_silent_down(3600) == []  # heard from just now
    downed = await plane.replicas.mark_silent_down(-1)  # every row silent
    ours = {r.id: r.status for r in downed if r.id in ("lost-1", "leaving-1")}
    assert ours == {"lost-1": ReplicaStatus.UP, "leaving-1": ReplicaStatus.DRAINING}
    assert not any(r.id in ours for r in await plane.replicas.mark_silent_down(-1))
    for record in downed:
        if record.id in ours:
            await worker_lost(plane, record)
    (decision,) = [d for d in await plane.alerts.decisions("") if d.kind == "worker"]
    assert decision.decision == "down" and decision.details["worker"] == "lost-1"
    assert decision.details["versions"] == [BUNDLED.key]
    assert "worker lost-1 (10.0.0.7:9000) silent for" in decision.reason
    async with plane.outbox._sessions() as session:
        rows = (await session.execute(select(OutboxMessage))).scalars()
        sent = [row for row in rows if row.event == WebhookEvent.WORKER_DOWN]
    assert len(sent) == 1
    (alert,) = sent[0].payload["alerts"] if "alerts" in sent[0].payload else [sent[0].payload]
    assert alert["labels"]["worker"] == "lost-1" and "deployment" not in alert["labels"]
    assert alert["annotations"]["runbook_url"].endswith("/runbooks/worker-down")
    monkeypatch.setattr(replicas_service, "FORGET_AFTER_S", -1.0)
    await plane.replicas.mark_silent_down(-1)
    remaining = {r.id for r in await plane.replicas.list()}
    assert not remaining & {"lost-1", "leaving-1"}


async def test_listeners_run_after_each_committed_write(plane: ControlPlane) -> None:
    seen: list[str] = []

    async def reload() -> None:
        seen.append((await plane.deployments.get(SMOLLM2)).spec.stable.version)

    async def broken() -> None:
        raise RuntimeError("listener bug")

    plane.add_listener(broken)  # logged; does not fail the write or stop the others
    plane.add_listener(reload)
    await register_warm(plane)
    await plane.deployments.set_canary(SMOLLM2, WARM, 10, actor="a")
    await plane.deployments.promote(SMOLLM2, actor="a")
    assert seen == [BUNDLED.version, BUNDLED.version, "warm"]
    with pytest.raises(Conflict):
        await plane.deployments.promote(SMOLLM2, actor="a")  # failed: nobody told
    assert len(seen) == 3


# ---- the deployments file


CONFIG = f"""
[[versions]]
model = "{SMOLLM2}"
version = "warm"
artifact = "bundled:{SMOLLM2}"
params = {{ temperature = 0.7 }}

[[deployments]]
name = "chat"
model = "{SMOLLM2}"
canary = {{ version = "warm", weight = 10 }}
max_tokens = 512
slo = {{ ttft_p99_s = 2.0 }}
fallback = {{ deployment = "chat-lite", trigger = "queue_wait", threshold_s = 2.0 }}

[[deployments]]
name = "chat-lite"
model = "{SMOLLM2}"
max_tokens = 128
"""


async def test_apply_config_upserts_versions_and_deployments(
    plane: ControlPlane, tmp_path: Path
) -> None:
    path = tmp_path / "vigil.toml"
    path.write_text(CONFIG)
    specs, _ = load_declarations(path, {SMOLLM2})
    await plane.apply_config(specs)

    view = {s.name: s for s in await plane.serving_view()}
    assert set(view) == {"chat", "chat-lite", SMOLLM2, MINILM}  # seeded ones left alone
    for spec in specs:
        served = view[spec.name]
        assert [v.key for v in served.versions] == [v.key for v in spec.versions]
        assert [v.params for v in served.versions] == [v.params for v in spec.versions]
        assert replace(served, stable=spec.stable, canary=spec.canary) == spec
    assert all(e.actor == "config" for e in await plane.audit.list("deployment", "chat"))

    num_entries = len(await plane.audit.list(limit=1000))
    await plane.apply_config(specs)  # the same file again: nothing to do
    assert len(await plane.audit.list(limit=1000)) == num_entries
    assert (await plane.deployments.get("chat")).revision == 1

    path.write_text(CONFIG.replace("max_tokens = 128", "max_tokens = 64"))
    await plane.apply_config(*load_declarations(path, {SMOLLM2}))
    lite = await plane.deployments.get("chat-lite")
    assert (lite.spec.max_tokens, lite.revision) == (64, 2)
    (entry, *_) = await plane.audit.list("deployment", "chat-lite")
    assert (entry.actor, entry.action) == ("config", "deployment.update")


async def test_a_version_the_file_declares_is_registered_before_a_deployment_serves_it(
    plane: ControlPlane, tmp_path: Path
) -> None:
    """An operator declares the next version in the file, then shifts a canary to it."""
    path = tmp_path / "vigil.toml"
    path.write_text(f"""
[[versions]]
model = "{SMOLLM2}"
version = "next"
artifact = "bundled:{SMOLLM2}"
params = {{ temperature = 0.7 }}

[[deployments]]
name = "chat"
model = "{SMOLLM2}"
""")
    specs, versions = load_declarations(path, {SMOLLM2})
    assert [v.key for v in versions] == [f"{SMOLLM2}@next"]
    await plane.apply_config(specs, versions)
    record = await plane.versions.get_version(SMOLLM2, "next")
    assert dict(record.ref.params) == {"temperature": 0.7}
    [entry] = await plane.audit.list("version", f"{SMOLLM2}@next")
    assert entry.actor == "config"
    chat = await plane.deployments.get("chat")
    assert chat.spec.stable.key == bundled_version(SMOLLM2).key and chat.spec.canary is None


async def test_apply_config_refuses_to_redefine_a_registered_version(
    plane: ControlPlane, tmp_path: Path
) -> None:
    await plane.versions.register_version(
        SMOLLM2, "warm", "bundled:" + SMOLLM2, params={"temperature": 0.2}, actor="a"
    )
    path = tmp_path / "vigil.toml"
    path.write_text(CONFIG)
    with pytest.raises(Conflict, match="declare a new version name"):
        await plane.apply_config(*load_declarations(path, {SMOLLM2}))
    assert [s.name for s in await plane.serving_view()] == [MINILM, SMOLLM2]


async def rolling_back_walks_back_the_promotions(plane: ControlPlane) -> None:
    """After a promote, roll back puts back the stable version it replaced (once that is
    ready), audited and kept in the history; a second one has nothing left to undo."""
    await register_warm(plane)
    await plane.deployments.set_canary(SMOLLM2, WARM, 10, actor="alice")
    promoted = await plane.deployments.promote(SMOLLM2, actor="alice")
    assert (promoted.spec.stable.key, promoted.revision) == (f"{SMOLLM2}@warm", 3)
    [entry] = await plane.deployments.stable_history(SMOLLM2)
    assert (entry.version.key, entry.revision, entry.action, entry.actor) == (
        BUNDLED.key, 2, "deployment.promote", "alice"
    )  # fmt: skip
    plan = await plane.deployments.rollback_plan(SMOLLM2)
    assert plan.leaving.key == f"{SMOLLM2}@warm" and plan.restores is not None
    assert (plan.restores.version.key, plan.revision) == (BUNDLED.key, 3)

    with pytest.raises(Conflict, match="not ready on any worker"):
        await plane.deployments.rollback(SMOLLM2, actor="bob")  # nothing written
    assert (await plane.deployments.stable_history(SMOLLM2))[0].restored_at is None
    await report_loaded(plane, SMOLLM2, STABLE.version)
    with pytest.raises(Conflict, match="is at revision 3, not 2"):
        await plane.deployments.rollback(SMOLLM2, revision=2, actor="bob")
    rolled = await plane.deployments.rollback(SMOLLM2, revision=3, actor="bob")
    assert (rolled.spec.stable.key, rolled.spec.canary, rolled.revision) == (BUNDLED.key, None, 4)
    audit = (await plane.audit.list("deployment", SMOLLM2))[0]
    assert (audit.actor, audit.action) == ("bob", "deployment.rollback")
    assert audit.before is not None and audit.after is not None
    assert (audit.before["stable"], audit.after["stable"]) == (f"{SMOLLM2}@warm", str(STABLE))
    newest, restored = await plane.deployments.stable_history(SMOLLM2)
    assert (newest.version.version, newest.action, newest.revision) == (
        "warm", "deployment.rollback", 3
    )  # fmt: skip
    assert restored.version.key == BUNDLED.key and restored.restored_at is not None

    with pytest.raises(Conflict) as caught:
        await plane.deployments.rollback(SMOLLM2, actor="bob")
    assert caught.value.code == "nothing_to_roll_back"  # a roll back is not undone by one

    # Promoted again; the version it replaced is retired meanwhile: nothing to serve.
    await plane.deployments.set_canary(SMOLLM2, WARM, 10, actor="alice")
    await plane.deployments.promote(SMOLLM2, actor="alice")
    await plane.versions.retire_version(SMOLLM2, STABLE.version, actor="alice")
    with pytest.raises(Conflict, match="is retired and can no longer be served") as caught:
        await plane.deployments.rollback(SMOLLM2, actor="bob")
    assert caught.value.code == "version_not_servable"
    assert (await plane.deployments.get(SMOLLM2)).spec.stable.version == "warm"


async def test_rolling_back_after_a_promote_restores_the_previous_stable(
    plane: ControlPlane,
) -> None:
    await rolling_back_walks_back_the_promotions(plane)


async def test_a_canary_is_dropped_by_roll_back_and_stable_left_alone(
    plane: ControlPlane,
) -> None:
    """With a canary, roll back (and the SLO loop's drop_canary) only drops it, even
    when an earlier promotion could be undone."""
    await register_warm(plane)
    await plane.deployments.set_canary(SMOLLM2, WARM, 10, actor="alice")
    await plane.deployments.promote(SMOLLM2, actor="alice")
    await report_loaded(plane, SMOLLM2, STABLE.version)
    for drop in (plane.deployments.rollback, plane.deployments.drop_canary):
        await plane.deployments.set_canary(SMOLLM2, STABLE, 5, actor="alice")
        plan = await plane.deployments.rollback_plan(SMOLLM2)
        assert (plan.leaving.key, plan.restores) == (BUNDLED.key, None)
        dropped = await drop(SMOLLM2, actor="system")
        assert (dropped.spec.stable.version, dropped.spec.canary) == ("warm", None)
    assert len(await plane.deployments.stable_history(SMOLLM2)) == 1  # the promotion's


async def test_an_edit_of_stable_is_kept_in_the_history(plane: ControlPlane) -> None:
    await register_warm(plane)
    record = await plane.deployments.get(SMOLLM2)
    await plane.deployments.update(
        SMOLLM2, replace(record.draft, stable=WARM), revision=1, actor="carol"
    )
    [entry] = await plane.deployments.stable_history(SMOLLM2)
    assert (entry.version.key, entry.action, entry.actor) == (
        BUNDLED.key, "deployment.update", "carol"
    )  # fmt: skip


# ---- the same rules on PostgreSQL


@pytest.fixture
def postgres_at_head(postgres_url: str) -> str:
    migrate(postgres_url)
    return postgres_url


@pytest.mark.postgres
async def test_the_control_plane_runs_on_postgresql(
    postgres_at_head: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = create_engine(postgres_at_head)
    plane = ControlPlane(session_factory(engine), password_hasher=FAST_HASHER)
    try:
        await plane.seed_bundled([SMOLLM2, MINILM])
        await plane.seed_bundled([SMOLLM2, MINILM])
        await register_warm(plane)
        await plane.deployments.set_canary(SMOLLM2, WARM, 10, revision=1, actor="alice")
        with pytest.raises(Conflict, match="is at revision 2, not 1"):
            await plane.deployments.promote(SMOLLM2, revision=1, actor="bob")

        check = deployments_module.check_draft
        raced = False

        async def racing_check(*args: object, **kwargs: object):  # type: ignore[no-untyped-def]
            nonlocal raced
            if not raced:
                raced = True
                await plane.deployments.set_weight(SMOLLM2, 20, actor="bob")
            return await check(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(deployments_module, "check_draft", racing_check)
        with pytest.raises(Conflict, match="changed by someone else"):
            await plane.deployments.promote(SMOLLM2, actor="alice")
        monkeypatch.undo()

        promoted = await plane.deployments.promote(SMOLLM2, revision=3, actor="alice")
        assert (promoted.spec.stable.version, promoted.revision) == ("warm", 4)
        spec = next(s for s in await plane.serving_view() if s.name == SMOLLM2)
        assert spec.stable.params == (("temperature", 0.7),)

        await report_loaded(plane, SMOLLM2, STABLE.version)
        rolled = await plane.deployments.rollback(SMOLLM2, revision=4, actor="alice")
        assert (rolled.spec.stable.key, rolled.revision) == (BUNDLED.key, 5)
        [back, promoted_from] = await plane.deployments.stable_history(SMOLLM2)
        assert (back.version.version, promoted_from.version.key) == ("warm", BUNDLED.key)
        assert promoted_from.restored_at is not None and back.restored_at is None

        await plane.users.create("root", "correct horse", Role.ADMIN, actor="cli")
        assert await plane.users.authenticate("root", "correct horse") is not None
        with pytest.raises(Conflict, match="last active admin"):
            await plane.users.disable("root", actor="root")
        await plane.webhooks.create("oncall", "https://h.example", ["shed"], actor="ops")
        await plane.keys.create("ci", actor="root")
        await plane.replicas.heartbeat(ReplicaReport("w1", "h:1", "cpu", 1 << 40))
        actions = [e.action for e in await plane.audit.list(limit=6)]
        assert actions == [
            "key.create",
            "webhook.create",
            "user.create",
            "deployment.rollback",
            "deployment.promote",
            "deployment.canary_weight",
        ]
    finally:
        await engine.dispose()


@pytest.mark.parametrize(
    "artifact",
    [
        "/etc/shadow",
        "/proc/self/environ",
        "/no/such/file.gguf",
        "{tmp}/../../etc/passwd",
        "{tmp}/link-out.gguf",
        "{tmp}/nul\x00byte.gguf",  # no file can be named so: refused, never a 500
        "{tmp}/\udb9d.gguf",
    ],
)
async def test_artifacts_outside_the_model_directories_are_refused_alike(
    plane: ControlPlane, db_path: Path, artifact: str
) -> None:
    tmp = db_path.parent
    (tmp / "link-out.gguf").symlink_to("/etc/hostname")
    with pytest.raises(InvalidRequest) as caught:
        await plane.versions.register_version(SMOLLM2, "x", artifact.format(tmp=tmp), actor="a")
    assert caught.value.code == "artifact_not_allowed" and caught.value.param == "artifact"
    # One message, whether the path exists or not, and no checksum: nothing is read.
    assert "is not usable" in caught.value.message
    assert not re.search(r"[0-9a-f]{64}", caught.value.message)
    assert await plane.audit.list("version", f"{SMOLLM2}@x") == []


async def test_a_path_inside_the_model_directory_through_dots_is_fine(
    plane: ControlPlane, db_path: Path
) -> None:
    (db_path.parent / "m").mkdir()
    gguf = db_path.parent / "m" / "tiny.gguf"
    gguf.write_bytes(b"GGUF weights")
    roundabout = f"{db_path.parent}/m/../m/tiny.gguf"
    v = await plane.versions.register_version(SMOLLM2, "dots", roundabout, actor="a")
    assert v.ref.checksum == artifact_checksum(gguf)


async def test_only_a_version_ready_on_a_worker_takes_traffic(plane: ControlPlane) -> None:
    await register_warm(plane, loaded=False)
    await plane.deployments.set_canary(SMOLLM2, WARM, 0, actor="alice")  # loads, no traffic
    with pytest.raises(Conflict, match="is registered, not ready on any worker") as caught:
        await plane.deployments.set_weight(SMOLLM2, 10, actor="alice")
    assert caught.value.code == "version_not_ready"
    with pytest.raises(Conflict, match="not ready"):
        await plane.deployments.promote(SMOLLM2, actor="alice")
    record = await plane.deployments.get(SMOLLM2)
    assert (record.spec.stable.key, record.revision) == (BUNDLED.key, 2)  # nothing written
    failed = await plane.versions.get_version(SMOLLM2, "warm")
    await plane.versions.record(
        model=SMOLLM2, version="warm", kind="generate", format="gguf",
        source=failed.ref.artifact, status=VersionStatus.FAILED, error="out of memory",
    )  # fmt: skip
    with pytest.raises(Conflict, match="it failed: out of memory"):
        await plane.deployments.promote(SMOLLM2, actor="alice")
    await report_loaded(plane, SMOLLM2, "warm")
    promoted = await plane.deployments.promote(SMOLLM2, actor="alice")
    assert promoted.spec.stable.version == "warm"


async def test_the_stable_version_before_the_current_one_comes_from_the_history(
    plane: ControlPlane,
) -> None:
    assert await plane.deployments.previous_stable(SMOLLM2) is None  # never promoted
    await register_warm(plane)
    await plane.deployments.set_canary(SMOLLM2, WARM, 10, actor="alice")
    await plane.deployments.promote(SMOLLM2, actor="alice")
    previous = await plane.deployments.previous_stable(SMOLLM2)
    assert previous is not None and previous.key == BUNDLED.key
    await plane.deployments.set_slo(SMOLLM2, SLOTargets(ttft_p99_s=3.0), actor="alice")
    assert (await plane.deployments.previous_stable(SMOLLM2)).key == BUNDLED.key  # type: ignore[union-attr]


@pytest.mark.postgres
async def test_rolling_back_after_a_promote_on_postgresql(postgres_at_head: str) -> None:
    engine = create_engine(postgres_at_head)
    plane = ControlPlane(session_factory(engine), password_hasher=FAST_HASHER)
    try:
        await plane.seed_bundled([SMOLLM2, MINILM])
        await rolling_back_walks_back_the_promotions(plane)
    finally:
        await engine.dispose()
