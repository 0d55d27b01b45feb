"""Canary traffic: exactly the configured share, spread evenly, per deployment."""

from __future__ import annotations

from dataclasses import replace

import pytest

from vigil.engine.bundled import ModelFormat, ModelKind
from vigil.platform.control.specs import DeploymentSpec, VersionRef
from vigil.platform.gateway.serving import CanarySplit

V1 = VersionRef("m", "1", ModelKind.GENERATE, ModelFormat.GGUF, "bundled:m")
V2 = replace(V1, version="2")


@pytest.mark.parametrize("weight", [0, 1, 10, 33, 50, 100])
def test_canary_gets_exactly_its_weight_of_every_hundred(weight: int) -> None:
    spec = DeploymentSpec("chat", V1, canary=V2, canary_weight=weight)
    split = CanarySplit()
    picks = [split.to_canary(spec) for _ in range(1000)]
    assert sum(picks) == 10 * weight
    for start in range(0, 1000, 100):
        assert sum(picks[start : start + 100]) == weight


def test_ten_percent_is_spread_not_bunched() -> None:
    spec = DeploymentSpec("chat", V1, canary=V2, canary_weight=10)
    split = CanarySplit()
    picks = [split.to_canary(spec) for _ in range(30)]
    assert [i for i, p in enumerate(picks) if p] == [9, 19, 29]


def test_no_canary_version_means_no_canary_traffic() -> None:
    split = CanarySplit()
    assert not any(split.to_canary(DeploymentSpec("chat", V1, canary_weight=50)) for _ in range(10))


def test_each_deployment_keeps_its_own_count() -> None:
    a = DeploymentSpec("a", V1, canary=V2, canary_weight=50)
    b = DeploymentSpec("b", V1, canary=V2, canary_weight=50)
    split = CanarySplit()
    assert [split.to_canary(a), split.to_canary(b), split.to_canary(a)] == [False, False, True]
