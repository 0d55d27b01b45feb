"""How far each version in use has come: loading, ready (on some worker, with its
tokenizer on the gateway), or failed (on every worker that reported it). Read by
/readyz, the console, and the record of version states in the database."""

from __future__ import annotations

from enum import StrEnum

from vigil.platform.gateway.serving import ServingView
from vigil.platform.gateway.tokenizers import TokenizerCache

LOADED_NOT_READY = 0.99  # the progress of a version loaded on a worker, not yet served


class VersionState(StrEnum):
    LOADING = "loading"
    READY = "ready"
    FAILED = "failed"


def version_states(view: ServingView, tokenizers: TokenizerCache) -> dict[str, VersionState]:
    """model@version -> its state, for every version in use."""
    states = {}
    for version in view.versions_in_use():
        reports = view.workers.slot_states(version.key)
        if any(r.state == "ready" for r in reports):
            ready = tokenizers.get(version) is not None
            states[version.key] = VersionState.READY if ready else VersionState.LOADING
        elif reports and all(r.state == "failed" for r in reports):
            states[version.key] = VersionState.FAILED
        else:
            states[version.key] = VersionState.LOADING
    return states


def serving_ready(view: ServingView, states: dict[str, VersionState]) -> bool:
    keys = [v.key for v in view.serving_versions()]
    return bool(keys) and all(states.get(key) is VersionState.READY for key in keys)


def version_progress(view: ServingView, states: dict[str, VersionState]) -> dict[str, float]:
    """model@version -> how far its load has come (0-1), on the worker furthest along,
    for the versions still loading. Under 1 until it is ready: after the worker, the
    gateway loads the version's tokenizer."""
    return {
        key: min(
            LOADED_NOT_READY,
            max((r.progress for r in view.workers.slot_states(key)), default=0.0),
        )
        for key, state in states.items()
        if state is VersionState.LOADING
    }


def version_error(view: ServingView, tokenizers: TokenizerCache, key: str) -> str | None:
    errors = [r.error for r in view.workers.slot_states(key) if r.error]
    return errors[0] if errors else tokenizers.errors.get(key)
