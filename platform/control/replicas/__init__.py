"""Replicas: the engine worker processes, as each last reported itself. A worker
registers when it starts and heartbeats its stats; both are upserts, so a worker that
reports after the control plane lost its row (a fresh database) is simply back.

Heartbeats are operational state, not admin writes: they are not audited."""
