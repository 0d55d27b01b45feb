"""The console under test: a client that signs in as a person does (the CSRF cookie
from a page, then the form), and posts as htmx does (the token in its header)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from litestar import Litestar
from litestar.testing import AsyncTestClient

from vigil.platform.control.access.records import Role
from vigil.platform.services import Services

PASSWORD = "correct horse battery"
USERS = {"vera": Role.VIEWER, "otto": Role.OPERATOR, "ada": Role.ADMIN}


@dataclass
class Console:
    client: AsyncTestClient[Litestar]
    services: Services

    def csrf(self) -> str:
        token = self.client.cookies.get("vigil_csrf")
        assert token, "no CSRF cookie yet: GET a console page first"
        return token

    async def sign_in(self, username: str, password: str = PASSWORD) -> Any:
        await self.client.get("/console/login")
        return await self.client.post(
            "/console/login",
            data={"username": username, "password": password, "_csrf_token": self.csrf()},
        )

    async def post(self, path: str, data: dict[str, Any] | None = None, **headers: str) -> Any:
        """An htmx POST from a console page: the token in its header."""
        return await self.client.post(
            path,
            data=data or {},
            headers={"hx-request": "true", "x-csrftoken": self.csrf(), **headers},
        )

    async def get(self, path: str, **params: Any) -> Any:
        return await self.client.get(path, params=params)


def texts(html: str, element_id: str) -> str:
    """The markup of the element with this id (to its first closing tag of that kind)."""
    m = re.search(rf'<(\w+)[^>]*id="{element_id}"', html)
    assert m, f"no element #{element_id}"
    end = html.find(f"</{m.group(1)}>", m.start())
    return html[m.start() : end]
