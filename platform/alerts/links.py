"""The links an alert carries, made absolute for the people who open them: Alertmanager
shows `generatorURL` and an `externalURL` as buttons, and on-call follows `runbook_url`
from a phone, where a path means nothing.

Alerts are written with paths on the gateway (`/console/slos/chat`, `/runbooks/slo-burn`);
the deliverer joins them to the gateway's external URL (`--external-url`,
`VIGIL_EXTERNAL_URL`: what the Ingress or load balancer answers to), or, when none is
set, to the address the gateway listens on, a wildcard one named by the host's name.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from typing import Any

WILDCARD_HOSTS = ("", "0.0.0.0", "::")


def public_base_url(external_url: str, host: str, port: int) -> str:
    """The gateway's URL without a trailing slash: the external one when set."""
    if external_url:
        return external_url.rstrip("/")
    if host in WILDCARD_HOSTS:
        host = socket.gethostname()
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


def absolute(link: str, base_url: str) -> str:
    """A path on the gateway joined to its base URL (which may carry a path prefix);
    anything else (an absolute URL, "") as it is."""
    return f"{base_url}{link}" if base_url and link.startswith("/") else link


def with_absolute_links(alert: Mapping[str, Any], base_url: str) -> dict[str, Any]:
    """The alert with its generatorURL and runbook_url annotation made absolute."""
    annotations = dict(alert.get("annotations", {}))
    if "runbook_url" in annotations:
        annotations["runbook_url"] = absolute(annotations["runbook_url"], base_url)
    return {
        **alert,
        "annotations": annotations,
        "generatorURL": absolute(alert.get("generatorURL", ""), base_url),
    }
