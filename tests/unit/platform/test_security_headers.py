"""Cookies set over HTTPS are marked Secure once, whatever their attributes' case."""

from __future__ import annotations

from vigil.platform.api.security_headers import secure_cookie


def test_a_cookie_gets_secure_once() -> None:
    plain = b"vigil_csrf=abc; HttpOnly; Path=/console; SameSite=strict"
    assert secure_cookie(plain) == plain + b"; Secure"
    assert secure_cookie(b"a=b; secure; Path=/") == b"a=b; secure; Path=/"
    assert secure_cookie(b"secure=1; Path=/") == b"secure=1; Path=/; Secure"  # a name, no flag
