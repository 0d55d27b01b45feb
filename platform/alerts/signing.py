"""How a webhook delivery is signed, and how a receiver checks it.

    X-Vigil-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>." + body)>

The timestamp is signed with the body, so a captured delivery cannot be replayed later
than the receiver's tolerance; the same delivery retried is signed anew (the
X-Vigil-Delivery id stays the same, so a receiver drops duplicates by it).
"""

from __future__ import annotations

import hashlib
import hmac

SIGNATURE_HEADER = "X-Vigil-Signature"
DELIVERY_HEADER = "X-Vigil-Delivery"
EVENT_HEADER = "X-Vigil-Event"
TOLERANCE_S = 300


def signature(secret: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def verify(secret: str, header: str, body: bytes, now_s: float) -> bool:
    """A receiver's check: the header's signature matches the body, and is recent."""
    fields = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    try:
        timestamp = int(fields["t"])
    except (KeyError, ValueError):
        return False
    if abs(now_s - timestamp) > TOLERANCE_S:
        return False
    expected = signature(secret, timestamp, body)
    return hmac.compare_digest(expected, header.strip())
