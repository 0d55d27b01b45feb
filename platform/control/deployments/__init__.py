"""Deployments: the names clients send as `model`, each a stable version, an optional
canary with an exact share of the traffic, the limits that protect it (caps, queues,
fallback, long-prompt pool) and its SLO targets.

An operator edits a `DeploymentDraft` (versions named, not resolved); the service checks
it, stores it, audits it and bumps the deployment's revision; the gateway reads the
result as a `DeploymentSpec` (specs.py). The deployments file declares the same thing
as TOML, applied at start.
"""
