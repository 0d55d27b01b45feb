"""The next page of a list, as a Link header (RFC 8288): the same query with `before`
set to where this page ended."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from litestar import Request


def next_link(request: Request[Any, Any, Any], next_before: int | None) -> dict[str, str]:
    if next_before is None:
        return {}
    query = {k: v for k, v in request.query_params.items() if k != "before"}
    query["before"] = str(next_before)
    return {"link": f'<{request.url.path}?{urlencode(query)}>; rel="next"'}
