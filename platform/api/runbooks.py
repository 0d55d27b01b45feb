"""`/runbooks/<name>`: the on-call pages of docs/runbooks, which every alert links to in
its `runbook_url`. Served by the gateway, so that a link opens wherever the console
does (no route to a documentation site needed from inside a cluster) and reads as the
running version wrote it. Public, like the alert text that links to it; Markdown as
written, which reads as it is."""

from __future__ import annotations

from importlib import resources

from litestar import Response, get
from litestar.params import FromPath

from vigil.platform.errors import NotFound

MARKDOWN = "text/markdown; charset=utf-8"


def runbook_names() -> list[str]:
    folder = resources.files("vigil.runbooks")
    return sorted(p.name.removesuffix(".md") for p in folder.iterdir() if p.name.endswith(".md"))


@get("/runbooks/{name:str}", include_in_schema=False)  # documentation, not API
async def runbook(name: FromPath[str]) -> Response[str]:
    # Only the names the folder holds: a path from the URL never reaches the filesystem.
    names = runbook_names()
    if name not in names:
        raise NotFound(
            f"No runbook is named {name!r}; there are: {', '.join(names)}.", param="name"
        )
    text = resources.files("vigil.runbooks").joinpath(f"{name}.md").read_text("utf-8")
    return Response(text, media_type=MARKDOWN)
