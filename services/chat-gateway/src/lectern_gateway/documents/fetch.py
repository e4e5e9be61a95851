"""Documents from the web: a URL fetched with limits, never into the private network.

``POST /v1/documents`` with a ``url`` field (and no file) fetches the page or file: http(s)
only, at most ``max_bytes`` (streamed, stopped as soon as it passes), within ``timeout_s``,
following at most ``MAX_REDIRECTS`` redirects, and only content types Lectern can index.
Every host on the way is resolved first and refused when any of its addresses is loopback,
private, link-local (169.254.169.254, the cloud metadata service), multicast, reserved or
unspecified, unless an operator allowed its network (``LECTERN_GATEWAY_URL_FETCH_ALLOWED_
NETWORKS``). What the page says of itself (canonical URL, title, author, date) is kept.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import socket
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx

from lectern_common.errors import BadInputError

MAX_REDIRECTS = 5
#: content types a URL may serve (the bytes decide the format afterwards, as for uploads)
ALLOWED_TYPES = (
    "text/html", "application/xhtml+xml", "text/plain", "text/markdown", "application/pdf",
    "application/epub+zip", "application/xml", "text/xml",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    "application/octet-stream",
)  # fmt: skip
_EXTENSIONS = {
    "text/html": ".html", "application/xhtml+xml": ".html", "text/plain": ".txt",
    "text/markdown": ".md", "application/pdf": ".pdf", "application/epub+zip": ".epub",
    "application/xml": ".xml", "text/xml": ".xml",
}  # fmt: skip


class UrlRefused(BadInputError):
    """Raised for a URL Lectern will not fetch (scheme, address, type, size, status)."""

    reason = "url_refused"


@dataclass
class Fetched:
    """A fetched URL on disk, with what the page says of itself."""

    path: Path
    filename: str
    size: int
    sha256: str
    head: bytes
    url: str
    final_url: str
    content_type: str
    page: dict[str, str] = field(default_factory=dict)


def _allowed(address: str, allowed: Sequence[str]) -> bool:
    ip = ipaddress.ip_address(address)
    if any(ip in ipaddress.ip_network(net, strict=False) for net in allowed):
        return True
    return ip.is_global and not ip.is_multicast


async def check_host(url: str, allowed_networks: Sequence[str]) -> None:
    """Refuse a URL whose scheme is not http(s) or whose host resolves to a non-public
    address (any of them) outside the allowed networks."""
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:  # "http://a:99999", "http://[::1"
        raise UrlRefused(f"not a valid URL: {url!r} ({exc})") from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UrlRefused(f"only http and https URLs are fetched, not {url!r}")
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(
            parts.hostname, port, type=socket.SOCK_STREAM
        )
    except OSError as exc:
        raise UrlRefused(f"{parts.hostname} cannot be resolved: {exc}") from exc
    addresses = {str(info[4][0]) for info in infos}
    refused = sorted(a for a in addresses if not _allowed(a, allowed_networks))
    if not addresses or refused:
        raise UrlRefused(
            f"{parts.hostname} is a private, loopback or link-local address ({', '.join(refused)})"
            ": Lectern does not fetch from the internal network unless an operator allows it"
        )


async def fetch(
    url: str,
    *,
    max_bytes: int,
    timeout_s: float = 30.0,
    allowed_networks: Sequence[str] = (),
    transport: httpx.AsyncBaseTransport | None = None,
) -> Fetched:
    """Fetch ``url`` into a temporary file (the caller removes it)."""
    current = url
    async with httpx.AsyncClient(
        follow_redirects=False, timeout=timeout_s, transport=transport,
        headers={"User-Agent": "Lectern/0.1 (+course material fetcher)"},
    ) as client:  # fmt: skip
        for _ in range(MAX_REDIRECTS + 1):
            await check_host(current, allowed_networks)
            async with asyncio.timeout(timeout_s), client.stream("GET", current) as response:
                if response.is_redirect:
                    location = response.headers.get("location")
                    if not location:
                        raise UrlRefused(f"{current} redirects nowhere")
                    current = urljoin(current, location)
                    continue
                if response.status_code != 200:
                    raise UrlRefused(f"{current} answered HTTP {response.status_code}")
                return await _save(response, url, current, max_bytes)
    raise UrlRefused(f"{url} redirects more than {MAX_REDIRECTS} times")


async def _save(response: httpx.Response, url: str, final: str, max_bytes: int) -> Fetched:
    content_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type and content_type not in ALLOWED_TYPES:
        raise UrlRefused(f"{final} serves {content_type}, which Lectern does not index")
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise UrlRefused(f"{final} is larger than the limit of {max_bytes} bytes")
    handle = tempfile.NamedTemporaryFile(prefix="lectern-url-", delete=False)  # noqa: SIM115
    digest, size, head = hashlib.sha256(), 0, bytearray()
    try:
        async for piece in response.aiter_bytes():
            size += len(piece)
            if size > max_bytes:
                raise UrlRefused(f"{final} is larger than the limit of {max_bytes} bytes")
            digest.update(piece)
            if len(head) < 8192:
                head.extend(piece[: 8192 - len(head)])
            handle.write(piece)
    except BaseException:
        handle.close()
        await asyncio.to_thread(Path(handle.name).unlink, missing_ok=True)
        raise
    handle.close()
    path = Path(handle.name)
    name = Path(urlsplit(final).path).name or urlsplit(final).hostname or "page"
    if "." not in name:
        name += _EXTENSIONS.get(content_type, ".html")
    page = await asyncio.to_thread(_page_metadata, path, final) if _is_html(content_type) else {}
    return Fetched(
        path=path, filename=name, size=size, sha256=digest.hexdigest(), head=bytes(head),
        url=url, final_url=final, content_type=content_type, page=page,
    )  # fmt: skip


def _is_html(content_type: str) -> bool:
    return content_type in ("text/html", "application/xhtml+xml", "")


def _page_metadata(path: Path, url: str) -> dict[str, str]:
    """Canonical URL, title, author and date the page states (trafilatura)."""
    from trafilatura import extract_metadata

    html = path.read_text(encoding="utf-8", errors="replace")
    found: Any = extract_metadata(html, default_url=url)
    if found is None:
        return {}
    keys = {"url": "canonical_url", "title": "title", "author": "author", "date": "date"}
    values = {mine: getattr(found, theirs, None) for theirs, mine in keys.items()}
    return {k: str(v) for k, v in values.items() if v}
