"""One sign-in, by the admin API's Basic credentials or the console's form alike: the
throttle (throttle.py) first, then the password, and a lockout written to the audit
log once per window."""

from __future__ import annotations

from vigil.platform.control.access.records import UserRecord
from vigil.platform.control.plane import ControlPlane
from vigil.platform.errors import NotFound, RateLimited, Unauthorized
from vigil.platform.gateway.throttle import Held, Refusal, SignInThrottle


async def sign_in(
    plane: ControlPlane, throttle: SignInThrottle, username: str, password: str, address: str
) -> UserRecord:
    """The user, unless the password is wrong or the throttle refuses the attempt (then
    the password is not even checked). A lockout is written to the audit log once per
    window, with its count of failures; for a username, only if the user exists."""
    attempt = await throttle.reserve(username, address)
    if isinstance(attempt, Refusal):
        raise RateLimited(
            refusal_message(attempt),
            code="too_many_sign_in_failures",
            retry_after_s=attempt.retry_after_s,
        )
    try:
        user = await plane.users.authenticate(username, password)
    except Exception:
        await throttle.abandoned(attempt)
        raise
    # (Cancelled while the hash is checked, the attempt keeps its slots: as a failure.)
    if user is not None:
        await throttle.succeeded(attempt)
        return user
    for lockout in attempt.lockouts:
        if lockout.what is Held.USERNAME and not await _exists(plane, username):
            continue  # made-up names: the address's lockout says enough
        details = {lockout.what.value: lockout.who, "failures": lockout.num_failures}
        await plane.audit.record("system", "sign_in.locked_out", "user", username, details)
    raise Unauthorized(
        "Wrong username or password, or the user is disabled.",
        code="invalid_credentials",
        scheme="Basic",
    )


def refusal_message(refusal: Refusal) -> str:
    wait = f"retry in {refusal.retry_after_s} s"
    if refusal.what is Held.ADDRESS:
        return f"Too many failed sign-ins from {refusal.who}; {wait}."
    return f"Too many failed sign-ins for '{refusal.who}' from this address; {wait}."


async def _exists(plane: ControlPlane, username: str) -> bool:
    try:
        await plane.users.get(username)
    except NotFound:
        return False
    return True
