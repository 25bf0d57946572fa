"""The inspector page (`agent-memory serve --ui`): one HTML shell, one script
and one style sheet, shipped as package data next to this module and served
at /ui. No build step and nothing fetched from elsewhere.

The page holds no data of its own: it asks for an API key (kept in the tab's
sessionStorage) and calls the JSON API with it (`Authorization: Bearer`), so it
shows exactly what the API returns to that key, tenant scoping included. User
text is only ever set as text (`textContent`), and a strict Content Security
Policy (scripts and styles from this origin only, no inline script) backs that up.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

__all__ = ["ASSETS", "mount"]

#: file name -> media type, every file of the page (all of them package data).
ASSETS = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
}

_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def asset(name: str) -> bytes:
    """The bytes of one file of the page, from the installed package."""
    return resources.files(__name__).joinpath(name).read_bytes()


def mount(app: Any) -> None:
    """Add GET /ui (the page) and GET /ui/<asset> to a FastAPI app; left out of
    the OpenAPI schema (they are not part of the JSON API)."""
    from fastapi.responses import RedirectResponse, Response

    def serve(name: str) -> Any:
        body, media = asset(name), ASSETS[name]

        async def handler() -> Response:
            return Response(body, media_type=media, headers=_HEADERS)

        return handler

    async def slash() -> RedirectResponse:
        return RedirectResponse("/ui", status_code=308)

    app.add_api_route("/ui", serve("index.html"), methods=["GET"], include_in_schema=False)
    app.add_api_route("/ui/", slash, methods=["GET"], include_in_schema=False)
    for name in ASSETS:
        if name != "index.html":
            app.add_api_route(f"/ui/{name}", serve(name), methods=["GET"], include_in_schema=False)
