"""Canary traffic and shadow mirrors: exactly the configured share, spread evenly, per
deployment."""

from __future__ import annotations

from dataclasses import replace

import pytest

from vigil.engine.bundled import ModelFormat, ModelKind
from vigil.platform.control.specs import DeploymentSpec, VersionRef
from vigil.platform.gateway.serving import TrafficSplit

V1 = VersionRef("m", "1", ModelKind.GENERATE, ModelFormat.GGUF, "bundled:m")
V2 = replace(V1, version="2")
V3 = replace(V1, version="3")


@pytest.mark.parametrize("weight", [0, 1, 10, 33, 50, 100])
def test_canary_gets_exactly_its_weight_of_every_hundred(weight: int) -> None:
    spec = DeploymentSpec("chat", V1, canary=V2, canary_weight=weight)
    split = TrafficSplit()
    picks = [split.to_canary(spec) for _ in range(1000)]
    assert sum(picks) == 10 * weight
    for start in range(0, 1000, 100):
        assert sum(picks[start : start + 100]) == weight


def test_ten_percent_is_spread_not_bunched() -> None:
    spec = DeploymentSpec("chat", V1, canary=V2, canary_weight=10)
    split = TrafficSplit()
    picks = [split.to_canary(spec) for _ in range(30)]
    assert [i for i, p in enumerate(picks) if p] == [9, 19, 29]


def test_no_canary_version_means_no_canary_traffic() -> None:
    split = TrafficSplit()
    assert not any(split.to_canary(DeploymentSpec("chat", V1, canary_weight=50)) for _ in range(10))


def test_each_deployment_keeps_its_own_count() -> None:
    a = DeploymentSpec("a", V1, canary=V2, canary_weight=50)
    b = DeploymentSpec("b", V1, canary=V2, canary_weight=50)
    split = TrafficSplit()
    assert [split.to_canary(a), split.to_canary(b), split.to_canary(a)] == [False, False, True]


def test_the_shadow_share_is_counted_apart_from_the_canarys() -> None:
    spec = DeploymentSpec("chat", V1, canary=V2, canary_weight=50, shadow=V3, shadow_weight=25)
    split = TrafficSplit()
    picks = [(split.to_canary(spec), split.to_shadow(spec)) for _ in range(100)]
    assert sum(c for c, _ in picks) == 50 and sum(s for _, s in picks) == 25
    assert not any(split.to_shadow(DeploymentSpec("chat", V1, shadow_weight=50)) for _ in range(9))
