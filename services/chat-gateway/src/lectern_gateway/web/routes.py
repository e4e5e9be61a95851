"""The small web UI: plain HTML, CSS and JavaScript shipped in the package (``static/``).

``/`` serves the page and ``/static/<name>`` its assets. The page talks to the public API
only (bearer token in ``sessionStorage``); in development it also offers the demo sign-in of
``POST /v1/dev/token``. None of this is part of the API, so it stays out of the OpenAPI
document.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, HTMLResponse

from lectern_gateway.deps import SettingsDep
from lectern_gateway.problems import ProblemError

router = APIRouter(include_in_schema=False)

STATIC_DIR = Path(__file__).resolve().parent.parent / "static"
INDEX = "index.html"
#: what ``/static/`` serves, by suffix (anything else answers 404)
MEDIA_TYPES = {
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
#: the page loads nothing but its own files and calls nothing but this gateway
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
DEV_SIGNIN_OFF = 'data-dev-signin="false"'
DEV_SIGNIN_ON = 'data-dev-signin="true"'


def index_html(*, development: bool) -> str:
    """The page; in development its body says the demo sign-in is available."""
    html = (STATIC_DIR / INDEX).read_text(encoding="utf-8")
    return html.replace(DEV_SIGNIN_OFF, DEV_SIGNIN_ON, 1) if development else html


@router.get("/")
def index(settings: SettingsDep) -> HTMLResponse:
    """The web UI."""
    return HTMLResponse(
        index_html(development=settings.environment == "development"),
        headers=security_headers(settings.lti_frame_ancestors),
    )


def security_headers(frame_ancestors: list[str]) -> dict[str, str]:
    """The page's headers; LMSs allowed to frame it (LTI launches) widen frame-ancestors."""
    if not frame_ancestors:
        return SECURITY_HEADERS
    allowed = " ".join(["'self'", *frame_ancestors])
    csp = SECURITY_HEADERS["Content-Security-Policy"].replace(
        "frame-ancestors 'none'", f"frame-ancestors {allowed}"
    )
    return {**SECURITY_HEADERS, "Content-Security-Policy": csp}


@router.get("/static/{name}")
def static_file(name: str) -> FileResponse:
    """One of the UI's own files (no sub-directories, no other suffixes)."""
    path = STATIC_DIR / name
    media_type = MEDIA_TYPES.get(path.suffix)
    # {name} never matches a "/", and only plain files of the directory itself are served
    if media_type is None or path.resolve().parent != STATIC_DIR or not path.is_file():
        raise ProblemError(404, "Not Found", "Not Found")
    return FileResponse(path, media_type=media_type, headers=SECURITY_HEADERS)
