"""Lectern talking to a platform over HTTP: its signing keys (JWKS, cached, fetched again
once for an unknown ``kid``), access tokens by the client-credentials grant with our signed
assertion (cached until they expire), and the requests of the LTI Advantage services.

Every URL is checked first by ``check_url`` (the gateway passes the document fetcher's host
check: no loopback, private or link-local address unless an operator allowed its network)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import httpx
import jwt

from lectern_common.db.types import Pool
from lectern_common.errors import BadInputError
from lectern_gateway.config import Settings
from lectern_gateway.lti import claims, keys

#: an unknown kid fetches the JWKS again at most this often per URL (a flood of forged kids
#: must not become a flood of requests to the platform)
REFETCH_MIN_S = 2.0
#: a token is used until this long before it expires
TOKEN_MARGIN_S = 30.0
MAX_ERROR_CHARS = 300


class PlatformError(Exception):
    """A platform did not answer as LTI says (``retryable``: it may later)."""

    def __init__(self, message: str, *, retryable: bool, status: int | None = None) -> None:
        super().__init__(message[:MAX_ERROR_CHARS])
        self.message = message[:MAX_ERROR_CHARS]
        self.retryable = retryable
        self.status = status


@dataclass
class _KeySet:
    fetched_at: float
    keys: dict[str, Any]


class PlatformClient:
    """One per process: the HTTP client, the platforms' keys and our access tokens."""

    def __init__(
        self,
        *,
        settings: Settings,
        check_url: Callable[[str], Awaitable[None]],
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.settings = settings
        self.check_url = check_url
        self.transport = transport
        self._client: httpx.AsyncClient | None = None
        self._jwks: dict[str, _KeySet] = {}
        self._tokens: dict[tuple[uuid.UUID, str], tuple[float, str]] = {}
        self._token_locks: dict[tuple[uuid.UUID, str], asyncio.Lock] = {}
        #: work started for a request that outlives it (a roster sync after a launch)
        self._background: set[asyncio.Task[None]] = set()

    @property
    def client(self) -> httpx.AsyncClient:
        """The shared HTTP client (made on first use)."""
        if self._client is None:
            self._client = httpx.AsyncClient(
                timeout=self.settings.lti_http_timeout_s,
                follow_redirects=False,
                transport=self.transport,
            )
        return self._client

    def spawn(self, work: Coroutine[Any, Any, None], *, name: str) -> None:
        """Run ``work`` in the background (cancelled by :meth:`close`)."""
        task = asyncio.create_task(work, name=name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def close(self) -> None:
        """Cancel the background work and close the HTTP client."""
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def send(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        """A request to a platform URL (host checked first); network errors as retryable
        ``PlatformError``."""
        try:
            await self.check_url(url)
        except BadInputError as exc:  # a URL into the private network: refused for good
            raise PlatformError(f"{url}: {exc.message}", retryable=False) from exc
        try:
            return await self.client.request(method, url, **kwargs)
        except httpx.HTTPError as exc:
            raise PlatformError(f"{url}: {type(exc).__name__} {exc}", retryable=True) from exc

    async def get_json(self, url: str, *, accept: str = "application/json", **kw: Any) -> Any:
        """GET a JSON document (2xx, else ``PlatformError``)."""
        response = await self.send("GET", url, headers={"Accept": accept, **kw.pop("headers", {})})
        return _json_of(response, url)

    # --- the platform's keys --------------------------------------------------------------

    async def signing_key(self, jwks_url: str, kid: str | None) -> Any | None:
        """The platform's public key ``kid`` (None: not in its JWKS, even fetched again)."""
        cached = self._jwks.get(jwks_url)
        now = time.monotonic()
        if cached is None or now - cached.fetched_at > self.settings.lti_jwks_cache_s:
            cached = await self._fetch_jwks(jwks_url)
        found = _pick(cached.keys, kid)
        if found is None and now - cached.fetched_at >= REFETCH_MIN_S:
            cached = await self._fetch_jwks(jwks_url)  # the platform may have rotated its key
            found = _pick(cached.keys, kid)
        return found

    async def _fetch_jwks(self, url: str) -> _KeySet:
        body = await self.get_json(url)
        found: dict[str, Any] = {}
        for entry in body.get("keys", []) if isinstance(body, dict) else []:
            if not isinstance(entry, dict) or entry.get("kty") != "RSA":
                continue
            try:
                found[str(entry.get("kid", ""))] = jwt.PyJWK(entry, algorithm="RS256").key
            except jwt.PyJWTError:
                continue
        keyset = _KeySet(fetched_at=time.monotonic(), keys=found)
        self._jwks[url] = keyset
        return keyset

    # --- access tokens --------------------------------------------------------------------

    async def access_token(self, pool: Pool, registration: dict[str, Any], scopes: str) -> str:
        """A bearer token for ``scopes`` (space-separated) from the platform's token endpoint,
        by the client-credentials grant with our signed JWT; cached until it expires."""
        key = (registration["id"], scopes)
        lock = self._token_locks.setdefault(key, asyncio.Lock())
        async with lock:
            cached = self._tokens.get(key)
            if cached is not None and cached[0] > time.monotonic():
                return cached[1]
            assertion = await keys.sign(
                pool,
                {
                    "iss": registration["client_id"],
                    "sub": registration["client_id"],
                    "aud": registration["token_audience"] or registration["token_url"],
                },
                lifetime_s=self.settings.lti_token_lifetime_s,
            )
            response = await self.send(
                "POST",
                registration["token_url"],
                data={
                    "grant_type": "client_credentials",
                    "client_assertion_type": claims.CLIENT_ASSERTION_TYPE,
                    "client_assertion": assertion,
                    "scope": scopes,
                },
                headers={"Accept": "application/json"},
            )
            body = _json_of(response, registration["token_url"])
            token = body.get("access_token") if isinstance(body, dict) else None
            if not isinstance(token, str) or not token:
                raise PlatformError("the token endpoint gave no access_token", retryable=True)
            lifetime = body.get("expires_in", 3600)
            lifetime = float(lifetime) if isinstance(lifetime, int | float) else 3600.0
            self._tokens[key] = (time.monotonic() + max(0.0, lifetime - TOKEN_MARGIN_S), token)
            return token

    def forget_token(self, registration_id: uuid.UUID, scopes: str) -> None:
        """Drop a cached token the platform refused."""
        self._tokens.pop((registration_id, scopes), None)


def _pick(found: dict[str, Any], kid: str | None) -> Any | None:
    if kid is not None:
        return found.get(kid)
    return next(iter(found.values())) if len(found) == 1 else None


def _json_of(response: httpx.Response, url: str) -> Any:
    if not 200 <= response.status_code < 300:
        retryable = response.status_code >= 500 or response.status_code in (408, 429)
        raise PlatformError(
            f"{url} answered HTTP {response.status_code}: {response.text[:200]}",
            retryable=retryable,
            status=response.status_code,
        )
    try:
        return response.json()
    except ValueError as exc:
        raise PlatformError(f"{url} did not answer JSON", retryable=True) from exc
