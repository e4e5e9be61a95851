"""The small HTML pages of the LTI flow (their script is ``static/lti.js``; every value is
escaped). Each page runs inside the LMS (a frame or a new window), so frame-ancestors is open
except where a teacher's choice is made (the picker: only the LMS that asked)."""

from __future__ import annotations

from html import escape
from urllib.parse import urlencode, urlsplit

from fastapi.responses import HTMLResponse

from lectern_gateway.lti.deeplink import Choice

_HEAD = (
    '<!doctype html><html lang="en"><head><meta charset="utf-8">'
    '<meta name="viewport" content="width=device-width, initial-scale=1">'
    '<title>{title}</title><link rel="stylesheet" href="/static/style.css">'
    '<script defer src="/static/lti.js"></script></head>'
)


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _attributes(values: dict[str, str | None]) -> str:
    return " ".join(
        f'data-{k.replace("_", "-")}="{escape(v, quote=True)}"' for k, v in values.items() if v
    )


def page(
    title: str,
    body: str,
    *,
    data: dict[str, str | None],
    frame_ancestors: str = "*",
    form_action: str = "'self'",
    status: int = 200,
    headers: dict[str, str] | None = None,
) -> HTMLResponse:
    """A page of the flow with its CSP."""
    csp = (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        f"form-action {form_action}; base-uri 'none'; frame-ancestors {frame_ancestors}"
    )
    html = (
        _HEAD.format(title=escape(title))
        + f'<body {_attributes(data)}><main class="lti">'
        + body
        + "</main></body></html>"
    )
    return HTMLResponse(
        html,
        status_code=status,
        headers={
            "Content-Security-Policy": csp,
            "Cache-Control": "no-store",
            "Referrer-Policy": "no-referrer",
            "X-Content-Type-Options": "nosniff",
            **(headers or {}),
        },
    )


def login_page(
    *, redirect_url: str, auth_url: str, state: str, secret: str, storage_target: str
) -> HTMLResponse:
    """Keep the login's secret in the platform's storage, then go to its auth endpoint."""
    body = f'<p>Signing in… <a href="{escape(redirect_url, quote=True)}">continue</a></p>'
    return page(
        "Signing in to Lectern",
        body,
        data={
            "lti": "login",
            "redirect": redirect_url,
            "state": state,
            "secret": secret,
            "storage_target": storage_target,
            "platform_origin": _origin(auth_url),
        },
    )


def recover_page(
    *, launch_url: str, state: str, id_token: str, storage_target: str, auth_url: str
) -> HTMLResponse:
    """Read the login's secret back from the platform's storage and post the launch again."""
    body = (
        f'<form id="lti-form" method="post" action="{escape(launch_url, quote=True)}">'
        f'<input type="hidden" name="id_token" value="{escape(id_token, quote=True)}">'
        f'<input type="hidden" name="state" value="{escape(state, quote=True)}">'
        '<input type="hidden" name="lti_storage_target" '
        f'value="{escape(storage_target, quote=True)}">'
        '<input type="hidden" name="lti_storage_secret" value="">'
        "<noscript><p>This launch needs JavaScript (or third-party cookies).</p></noscript>"
        "</form>"
    )
    return page(
        "Signing in to Lectern",
        body,
        data={
            "lti": "recover",
            "state": state,
            "storage_target": storage_target,
            "platform_origin": _origin(auth_url),
        },
    )


def landing_page(
    *, token: str, class_id: str | None, target: str, view: str, framable: bool
) -> HTMLResponse:
    """Store the sign-in and open the web UI (framed by an LMS that may not frame the UI:
    a link opens it in a new window, the sign-in in the URL's fragment)."""
    handover = f"/#{urlencode({'lti-token': token, 'view': view})}"
    body = (
        "<p>Signed in to Lectern. "
        f'<a href="{escape(handover, quote=True)}" target="_blank" rel="noopener">'
        "Open Lectern in a new window</a></p>"
    )
    return page(
        "Lectern",
        body,
        data={
            "lti": "land",
            "token": token,
            "class_id": class_id,
            "target": target,
            "next": f"/#{view}",
            "framable": "true" if framable else "false",
        },
    )


def picker_page(
    *, deep_link_id: str, choices: list[Choice], multiple: bool, platform_url: str
) -> HTMLResponse:
    """The teacher's choice of what to place in the course."""
    kind = "checkbox" if multiple else "radio"
    rows = "".join(
        f'<li><label><input type="{kind}" name="item" value="{escape(str(c.target), quote=True)}">'
        f" {escape(c.title)} <small>({escape(c.detail)})</small></label></li>"
        for c in choices
    )
    body = "<h1>Place Lectern content in your course</h1>" + (
        f'<form method="post" action="/lti/deep-links/{escape(deep_link_id, quote=True)}">'
        f'<ul>{rows}</ul><button type="submit">Place</button></form>'
        if choices
        else "<p>No material, module or quiz to place yet: upload or make one in Lectern first.</p>"
    )
    return page(
        "Choose Lectern content", body, data={"lti": "pick"}, frame_ancestors=_origin(platform_url)
    )


def post_page(*, url: str, jwt: str) -> HTMLResponse:
    """Post the signed deep-linking response back to the LMS."""
    body = (
        f'<form id="lti-form" method="post" action="{escape(url, quote=True)}">'
        f'<input type="hidden" name="JWT" value="{escape(jwt, quote=True)}">'
        '<noscript><button type="submit">Return to the course</button></noscript></form>'
    )
    return page("Returning to the course", body, data={"lti": "post"}, form_action=_origin(url))


def closed_page(*, issuer: str, client_id: str) -> HTMLResponse:
    """A dynamic registration ended: tell the LMS to close its dialog."""
    body = (
        f"<p>Lectern is registered with {escape(issuer)} (client id {escape(client_id)}). "
        "You may close this window.</p>"
    )
    return page("Lectern registered", body, data={"lti": "close"})
