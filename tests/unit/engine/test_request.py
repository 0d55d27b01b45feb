"""Priority classes keep one spelling everywhere outside the engine."""

from __future__ import annotations

from vigil.engine.request import Priority


def test_every_priority_round_trips_through_its_label() -> None:
    assert [p.label for p in Priority] == ["interactive", "batch"]
    assert all(Priority.from_label(p.label) is p for p in Priority)


def test_an_unknown_label_is_none_not_an_error() -> None:
    assert Priority.from_label("urgent") is None
    assert Priority.from_label("INTERACTIVE") is None  # labels are lower case
