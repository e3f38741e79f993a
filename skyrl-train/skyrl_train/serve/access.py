"""Who may call the server, checked before any route reads a request: `AccessPolicy` and `AccessGuard`.

`AccessGuard` is ASGI middleware around the whole app. In order, it refuses:

1. a `Host` header that names none of the allowed hosts (421): loopback names, the host the server is bound to,
   any IP address literal, and `AccessPolicy.allowed_hosts`. A page on another site that reaches a server on this
   machine or network by DNS rebinding sends its own domain name as `Host`, never an IP literal;
2. an `Origin` header (sent by browsers) that is not this server's own (`scheme://<Host header>`) nor in
   `AccessPolicy.allowed_origins` (403);
3. on the OpenAI routes (`/v1/...`), when an API key is set, a request without `Authorization: Bearer <api key>`
   (401); on the control routes, a request without `Authorization: Bearer <control token>` (401), or with another
   token (403). `/health` is open;
4. a body-carrying request (POST, PUT, PATCH) without a JSON content type (415): a browser sends a cross-site
   request with a JSON content type only after a CORS preflight, which this server never answers, so a JSON-only
   server cannot be driven by a form or `fetch` from another site;
5. a body larger than the limit (413): at once from `Content-Length`, else as soon as the bytes read pass it.

Tokens are compared in constant time (`hmac.compare_digest`). Refusals are OpenAI-shaped JSON errors.
"""

from __future__ import annotations

import dataclasses
import hmac
import ipaddress
import logging
from collections.abc import Awaitable, Callable, Collection
from typing import Any
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.responses import JSONResponse

__all__ = ["LOOPBACK_HOSTS", "AccessGuard", "AccessPolicy", "host_name"]

logger = logging.getLogger(__name__)

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
OPENAI_PREFIX = "/v1/"
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


@dataclasses.dataclass(frozen=True)
class AccessPolicy:
    """What `AccessGuard` lets through (see the module docstring).

    Args:
        api_key: required on the OpenAI routes; None leaves them open.
        control_token: required on the control routes (an app with control routes refuses to start without one).
        allowed_hosts: host names accepted in `Host` besides loopback names and IP literals: the bound host and
            any names clients use (`for_bind_host` adds the bound host).
        allowed_origins: browser origins accepted besides the server's own, e.g. `http://localhost:3000`.
    """

    api_key: str | None = None
    control_token: str | None = None
    allowed_hosts: frozenset[str] = frozenset()
    allowed_origins: frozenset[str] = frozenset()

    @classmethod
    def for_bind_host(
        cls,
        bind_host: str,
        *,
        api_key: str | None = None,
        control_token: str | None = None,
        allowed_hosts: Collection[str] = (),
        allowed_origins: Collection[str] = (),
    ) -> AccessPolicy:
        """The policy of a server bound to `bind_host`: that name is an allowed host too."""
        return cls(
            api_key=api_key or None,
            control_token=control_token or None,
            allowed_hosts=frozenset(_normal_host(h) for h in (bind_host, *allowed_hosts)),
            allowed_origins=frozenset(o.rstrip("/").lower() for o in allowed_origins),
        )

    def host_allowed(self, host_header: str | None) -> bool:
        if not host_header:
            return False
        name = host_name(host_header)
        return name in LOOPBACK_HOSTS or name in self.allowed_hosts or _is_ip_literal(name)

    def origin_allowed(self, origin: str, host_header: str) -> bool:
        origin = origin.rstrip("/").lower()
        if origin in self.allowed_origins:
            return True
        parts = urlsplit(origin)
        return parts.scheme in ("http", "https") and parts.netloc == host_header.lower()


def host_name(host_header: str) -> str:
    """The host name of a `Host` header value, without the port: `Example.COM:80` -> `example.com`, `[::1]:8000`
    -> `::1`."""
    host = host_header.strip()
    if host.startswith("["):
        return _normal_host(host[1 : host.find("]")] if "]" in host else host[1:])
    if host.count(":") == 1:
        host = host.split(":", 1)[0]
    return _normal_host(host)


class AccessGuard:
    """ASGI middleware enforcing `policy` and the body limit in front of `app` (see the module docstring).

    Args:
        control_paths: the paths of the control routes (they need the control token).
        max_body_bytes: the largest request body accepted.
    """

    def __init__(self, app, policy: AccessPolicy, *, control_paths: Collection[str] = (), max_body_bytes: int):
        self.app = app
        self.policy = policy
        self.control_paths = frozenset(control_paths)
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: dict[str, Any], receive: Callable[[], Awaitable[dict]], send) -> None:
        if scope["type"] != "http":  # lifespan (the app has no websocket routes)
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        refusal = self._refusal(scope, headers)
        if refusal is not None:
            status, message, extra_headers = refusal
            logger.info("refused %s %s: %d %s", scope.get("method", "-"), scope["path"], status, message)
            await _error(status, message, extra_headers)(scope, receive, send)
            return
        if scope.get("method") not in _BODY_METHODS:
            await self.app(scope, receive, send)
            return
        body = await _read_body(receive, self.max_body_bytes)
        if body is _DISCONNECTED:
            return
        if body is None:
            await _error(413, self._too_large())(scope, receive, send)
            return
        await self.app(scope, _replay(body, receive), send)

    def _refusal(self, scope: dict[str, Any], headers: Headers) -> tuple[int, str, dict[str, str]] | None:
        """(status, message, headers) of the first check the request fails, or None."""
        host = headers.get("host")
        if not self.policy.host_allowed(host):
            return 421, f"the Host {host!r} is not one this server answers to (see --allowed-hosts)", {}
        origin = headers.get("origin")
        if origin is not None and not self.policy.origin_allowed(origin, host):
            return 403, f"requests from the origin {origin!r} are not allowed (see --allowed-origins)", {}
        path = scope["path"]
        if path in self.control_paths:
            refusal = _token_refusal(headers, self.policy.control_token, "control token", wrong_status=403)
            if refusal is not None:
                return refusal
        elif path.startswith(OPENAI_PREFIX) and self.policy.api_key is not None:
            refusal = _token_refusal(headers, self.policy.api_key, "API key", wrong_status=401)
            if refusal is not None:
                return refusal
        if scope.get("method") in _BODY_METHODS and not _is_json(headers.get("content-type")):
            return 415, "request bodies must be JSON (Content-Type: application/json)", {}
        length = headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body_bytes:
            return 413, self._too_large(), {}
        return None

    def _too_large(self) -> str:
        return f"the request body is larger than this server's limit of {self.max_body_bytes} bytes (--max-body-bytes)"


def _token_refusal(
    headers: Headers, expected: str | None, what: str, *, wrong_status: int
) -> tuple[int, str, dict[str, str]] | None:
    challenge = {"WWW-Authenticate": "Bearer"}
    scheme, _, given = headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        return 401, f"this route needs the {what}: send `Authorization: Bearer <{what}>`", challenge
    if expected is None or not hmac.compare_digest(given.strip().encode(), expected.encode()):
        return wrong_status, f"wrong {what}", challenge if wrong_status == 401 else {}
    return None


def _is_json(content_type: str | None) -> bool:
    media_type = (content_type or "").split(";", 1)[0].strip().lower()
    return media_type == "application/json" or (media_type.startswith("application/") and media_type.endswith("+json"))


_DISCONNECTED = object()


async def _read_body(receive, limit: int) -> bytes | object | None:
    """The whole request body; None as soon as more than `limit` bytes have arrived (the rest is never read);
    `_DISCONNECTED` if the client went away first."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return _DISCONNECTED
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes, receive):
    """A `receive` that gives the app `body` in one message, then passes on the client's later messages
    (a disconnect)."""
    replayed = False

    async def replay() -> dict[str, Any]:
        nonlocal replayed
        if replayed:
            return await receive()
        replayed = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    kind = {401: "authentication_error", 403: "permission_error", 413: "request_too_large"}.get(
        status, "invalid_request_error"
    )
    body = {"error": {"message": message, "type": kind, "param": None, "code": None}}
    return JSONResponse(body, status_code=status, headers=headers)


def _normal_host(host: str) -> str:
    return host.strip().strip("[]").rstrip(".").lower()


def _is_ip_literal(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True
