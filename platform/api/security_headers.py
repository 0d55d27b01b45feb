"""Headers every answer carries, and what changes when the client reached us over TLS.

No page may be framed by another site (clickjacking on the console's buttons):
`X-Frame-Options: DENY` and CSP `frame-ancestors 'none'`. When the request came over
HTTPS, which behind a TLS-terminating proxy is known only from the X-Forwarded-Proto of
a proxy in --forwarded-allow-ips (uvicorn sets the scope's scheme from it, and from no
one else), every cookie is marked `Secure` and HSTS tells the browser to keep to HTTPS.
"""

from __future__ import annotations

from litestar.types import ASGIApp, Message, Receive, Scope, Send

HSTS_MAX_AGE_S = 365 * 86400
ALWAYS = (
    (b"x-frame-options", b"DENY"),
    (b"content-security-policy", b"frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
)


def secure_cookie(value: bytes) -> bytes:
    attributes = [a.strip().lower() for a in value.split(b";")[1:]]
    return value if b"secure" in attributes else value + b"; Secure"


def secure_answers(app: ASGIApp) -> ASGIApp:
    async def secured(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        tls = scope.get("scheme") == "https"

        async def send_secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                if tls:
                    headers = [
                        (k, secure_cookie(v) if k.lower() == b"set-cookie" else v)
                        for k, v in headers
                    ]
                    headers.append((b"strict-transport-security", b"max-age=%d" % HSTS_MAX_AGE_S))
                names = {k.lower() for k, _ in headers}
                headers.extend((k, v) for k, v in ALWAYS if k not in names)
                message = {**message, "headers": headers}
            await send(message)

        await app(scope, receive, send_secured)

    return secured
