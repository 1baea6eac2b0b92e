"""One bounded HTTP exchange: what every client of a remote service speaks through (slurmrestd, MLflow, webhooks).

A server is a remote party that may be slow, broken or hostile. :func:`exchange` holds it to:

* **one deadline for the whole exchange**: resolving the name, connecting, sending, every redirect and the answer
  to its last byte take at most ``timeout`` seconds together. A server that sends a byte a second never lets a
  per-read timeout fire; here it is cut off at the deadline (the exchange runs in a worker thread whose socket is
  shut at the deadline, and the caller returns then, whatever the worker is still blocked in);
* **a bounded answer**: at most ``max_bytes`` bytes. A larger ``Content-Length`` is refused before the body is
  read; a body without one is read no further than the bound;
* **redirects within one origin only**: a redirect is followed (at most :data:`MAX_REDIRECTS`) only to the same
  scheme, host and port. One to another origin is refused (:class:`HttpRedirectError`) without connecting there, so
  no credential (``Authorization``, slurmrestd's ``X-SLURM-USER-TOKEN``) ever reaches another server;
* **bounded JSON**: :meth:`Response.json` refuses, before parsing, arrays and objects nested deeper than
  :data:`MAX_DEPTH` and numbers longer than :data:`MAX_DIGITS` digits
  (:func:`~airflow_provider_gpusched.core.safe_files.parse_json_record`).

A caller that makes many exchanges for one step (a tracking sync, many requests per trial) bounds them together
with :func:`time_budget`: inside it, every exchange of this context ends by the budget's end as well.

``user:password@`` in a URL is sent as Basic auth. Proxies come from the environment (``http_proxy``,
``https_proxy``, ``no_proxy``) as ``urllib`` takes them. No error message holds the URL's path, query or user
information (a webhook's URL is a secret): only its origin, where one is named at all.

Pure standard library (``http.client``), no Airflow imports.
"""

from __future__ import annotations

import base64
import contextlib
import contextvars
import http.client
import socket
import ssl
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_gpusched.core.errors import GpuschedError
from airflow_provider_gpusched.core.safe_files import BadRecordError, parse_json_record

#: redirects followed within one origin
MAX_REDIRECTS = 5
#: how deep a JSON answer may nest (slurmrestd's and MLflow's nest a few levels)
MAX_DEPTH = 64
#: the longest number a JSON answer may hold (Slurm's 64-bit NO_VAL64 has 20 digits)
MAX_DIGITS = 40
_REDIRECTS = frozenset([301, 302, 303, 307, 308])
#: the end of the time budget the exchanges of this context share (time.monotonic()), and what it is called
_BUDGET: contextvars.ContextVar[tuple[float, str] | None] = contextvars.ContextVar("gpusched_http_budget", default=None)
_CHUNK = 1 << 16


class HttpError(GpuschedError):
    """The exchange could not be completed as bounded: the message says why (never the URL's path or query)."""


class HttpUnreachableError(HttpError):
    """No answer: the server could not be reached, or closed the connection (try again later)."""


class HttpTimeoutError(HttpUnreachableError):
    """No complete answer within the exchange's deadline."""


class HttpTooBigError(HttpError):
    """The answer is larger than the exchange's bound."""


class HttpRedirectError(HttpError):
    """A redirect that was not followed: to another origin, or one too many."""


class HttpAnswerError(HttpError):
    """An answer that is not the JSON expected (or nested too deep, or with a number too long)."""


@dataclass(frozen=True)
class Response:
    """A complete answer: its status, reason, headers (names in lower case) and body."""

    status: int
    reason: str
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)

    def text(self) -> str:
        return self.body.decode(errors="replace")

    def json(self, what: str, *, max_depth: int = MAX_DEPTH, max_digits: int = MAX_DIGITS) -> Any:
        """The body as JSON, bounded; :class:`HttpAnswerError` naming ``what`` (the endpoint) otherwise."""
        try:
            return parse_json_record(what, self.body, max_depth=max_depth, max_digits=max_digits)
        except BadRecordError as exc:
            raise HttpAnswerError(str(exc)) from None


def origin(url: str) -> str:
    """``scheme://host:port`` of ``url`` (the port spelled out), what a redirect must keep."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:  # not a port: an origin of its own, which no configured server has (never followed)
        return f"{scheme}://<a port that is not a number from 0 to 65535>"
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{port or (443 if scheme == 'https' else 80)}"


@contextlib.contextmanager
def time_budget(seconds: float | None, what: str) -> Iterator[None]:
    """Every :func:`exchange` made in this block (this thread or task) ends within ``seconds`` from now, together,
    each also within its own ``timeout``; one that would start after the budget is spent is refused
    (:class:`HttpTimeoutError` naming ``what``). None: no budget (the block's exchanges keep their own deadlines)."""
    if seconds is None:
        yield
        return
    token = _BUDGET.set((time.monotonic() + float(seconds), what))
    try:
        yield
    finally:
        _BUDGET.reset(token)


def exchange(
    method: str,
    url: str,
    *,
    body: bytes | None = None,
    headers: Mapping[str, str] | None = None,
    timeout: float,
    max_bytes: int,
    redirects: int = MAX_REDIRECTS,
    context: ssl.SSLContext | None = None,
    keep_first: bool = False,
) -> Response:
    """``method`` ``url`` with ``body`` and ``headers``, bounded as the module says; the final answer, whatever its
    status (an error status is the caller's to read). :class:`HttpTimeoutError` past ``timeout`` seconds,
    :class:`HttpUnreachableError` when no answer came, :class:`HttpTooBigError` past ``max_bytes`` (with
    ``keep_first``, the answer's first ``max_bytes`` instead, the rest left unread: a caller that needs only the
    status), :class:`HttpRedirectError` for a redirect not followed."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise HttpError("not an http(s) URL with a host")
    try:
        port_ok = parts.port is None or parts.port >= 0
    except ValueError:
        port_ok = False
    if not port_ok:
        raise HttpError("the URL's port is not a number from 0 to 65535")
    if not timeout or timeout <= 0:
        raise HttpError(f"the exchange needs a deadline in seconds, got {timeout!r}")
    deadline, within = time.monotonic() + float(timeout), f"within {timeout:g}s"
    budget = _BUDGET.get()
    if budget is not None and budget[0] < deadline:
        deadline, within = budget[0], f"within {budget[1]}"
        if deadline <= time.monotonic():
            raise HttpTimeoutError(f"{budget[1]} is spent: the exchange was not started")
    state = _State()
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["answer"] = _exchange(
                method, url, body, dict(headers or {}), deadline, max_bytes, redirects, context, state, keep_first
            )
        except BaseException as exc:  # noqa: BLE001 - handed to the caller below
            outcome["error"] = exc

    worker = threading.Thread(target=run, name="gpusched-http", daemon=True)
    worker.start()
    worker.join(max(0.0, deadline - time.monotonic()))
    if worker.is_alive():
        state.cut()  # unblocks the worker's read; the caller does not wait for it
        raise HttpTimeoutError(f"timed out: no complete answer {within}")
    if "error" in outcome:
        exc = outcome["error"]
        # the socket's own timeout can fire at the deadline just before the join above returns: the same deadline,
        # said the same way (which budget it was: CI's run of 91c3fa0 said only "timed out (timed out)")
        if state.was_cut or isinstance(exc, HttpTimeoutError):
            raise HttpTimeoutError(f"timed out: no complete answer {within}") from None
        raise exc
    answer: Response = outcome["answer"]
    return answer


class _State:
    """The connection in use, for the caller to shut at the deadline."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.conn: http.client.HTTPConnection | None = None
        self.was_cut = False

    def use(self, conn: http.client.HTTPConnection | None) -> None:
        with self.lock:
            if self.was_cut:
                raise HttpTimeoutError("timed out: the deadline passed")
            self.conn = conn

    def cut(self) -> None:
        with self.lock:
            self.was_cut = True
            conn = self.conn
        sock = getattr(conn, "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                socket.socket.shutdown(sock, socket.SHUT_RDWR)  # the raw socket's, under TLS too


def _exchange(
    method: str,
    url: str,
    body: bytes | None,
    headers: dict[str, str],
    deadline: float,
    max_bytes: int,
    redirects: int,
    context: ssl.SSLContext | None,
    state: _State,
    keep_first: bool,
) -> Response:
    first = origin(url)
    parts = urllib.parse.urlsplit(url)
    if parts.username is not None and not any(k.lower() == "authorization" for k in headers):
        user, password = urllib.parse.unquote(parts.username), urllib.parse.unquote(parts.password or "")
        headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    for _ in range(redirects + 1):
        answer = _one(method, url, body, headers, deadline, max_bytes, context, state, keep_first)
        location = answer.headers.get("location")
        if answer.status not in _REDIRECTS or not location:
            return answer
        url = urllib.parse.urljoin(url, location)
        if urllib.parse.urlsplit(url).scheme not in ("http", "https") or origin(url) != first:
            where = origin(url) if urllib.parse.urlsplit(url).hostname else "a URL that is not http(s)"
            raise HttpRedirectError(
                f"HTTP {answer.status}: redirected from {first} to {where}, another origin: not followed (no "
                f"credential is sent there); if that is the server meant, configure its address instead"
            )
        if answer.status == 303 or (answer.status in (301, 302) and method not in ("GET", "HEAD")):
            method, body = "GET", None
            headers = {k: v for k, v in headers.items() if k.lower() not in ("content-type", "content-length")}
    raise HttpRedirectError(f"more than {redirects} redirects within {first}: not followed further")


def _proxy_for(scheme: str, host: str) -> urllib.parse.SplitResult | None:
    """The environment's proxy for ``scheme``, unless ``host`` is in ``no_proxy`` (urllib's reading of them)."""
    proxy = urllib.request.getproxies().get(scheme)
    if not proxy or urllib.request.proxy_bypass(host):
        return None
    return urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")


def _connection(
    parts: urllib.parse.SplitResult, timeout: float, context: ssl.SSLContext | None
) -> tuple[http.client.HTTPConnection, dict[str, str] | None]:
    """A connection to the server of ``parts`` (or to the proxy on the way); for a plain HTTP proxy, which is asked
    for the whole URL, the headers it wants (else None)."""
    host, port = parts.hostname or "", parts.port
    proxy = _proxy_for(parts.scheme, host)
    auth: dict[str, str] = {}
    if proxy is not None and proxy.username is not None:
        user, password = urllib.parse.unquote(proxy.username), urllib.parse.unquote(proxy.password or "")
        auth["Proxy-Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    if proxy is not None and proxy.hostname:
        via: http.client.HTTPConnection
        if proxy.scheme == "https":
            via = http.client.HTTPSConnection(proxy.hostname, proxy.port, timeout=timeout, context=context)
        else:
            via = http.client.HTTPConnection(proxy.hostname, proxy.port, timeout=timeout)
        if parts.scheme == "https":
            tunnel = http.client.HTTPSConnection(proxy.hostname, proxy.port, timeout=timeout, context=context)
            tunnel.set_tunnel(host, port, headers=auth)
            return tunnel, None
        return via, auth
    if parts.scheme == "https":
        return http.client.HTTPSConnection(host, port, timeout=timeout, context=context), None
    return http.client.HTTPConnection(host, port, timeout=timeout), None


def _one(
    method: str,
    url: str,
    body: bytes | None,
    headers: Mapping[str, str],
    deadline: float,
    max_bytes: int,
    context: ssl.SSLContext | None,
    state: _State,
    keep_first: bool,
) -> Response:
    parts = urllib.parse.urlsplit(url)
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise HttpTimeoutError("timed out: the deadline passed")
    conn, proxy_headers = _connection(parts, remaining, context)
    state.use(conn)
    response: http.client.HTTPResponse | None = None
    try:
        if proxy_headers is not None:
            netloc = parts.hostname or ""
            netloc = f"[{netloc}]" if ":" in netloc else netloc
            netloc += f":{parts.port}" if parts.port else ""
            target = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))
            headers = {**headers, **proxy_headers}
        else:
            target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        conn.request(method, target, body=body, headers=dict(headers))
        response = conn.getresponse()
        length = (response.getheader("Content-Length") or "").strip()
        if not keep_first and length.isdigit() and (len(length) > 20 or int(length) > max_bytes):
            raise HttpTooBigError(f"the answer is {length} bytes, more than the {max_bytes} this client reads")
        chunks, total = [], 0
        while total < max_bytes + (not keep_first):
            chunk = response.read(min(_CHUNK, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if keep_first and total >= max_bytes:
                chunks[-1] = chunk[: len(chunk) - (total - max_bytes)]
                break
            if total > max_bytes:
                raise HttpTooBigError(f"the answer is larger than the {max_bytes} bytes this client reads")
        if state.was_cut:
            raise HttpTimeoutError("timed out: the deadline passed")
        return Response(
            response.status,
            response.reason,
            b"".join(chunks),
            {k.lower(): v for k, v in response.getheaders()},
        )
    except HttpError:
        raise
    except ssl.SSLCertVerificationError as exc:
        raise HttpError(f"the server's TLS certificate was refused: {exc.verify_message}") from None
    except (OSError, http.client.HTTPException) as exc:
        if state.was_cut:
            raise HttpTimeoutError("timed out: the deadline passed") from None
        if isinstance(exc, TimeoutError):
            raise HttpTimeoutError(f"timed out ({exc})") from None
        raise HttpUnreachableError(f"{type(exc).__name__}: {exc}") from None
    finally:
        if response is not None:  # its file holds the socket open after the connection lets go of it
            response.close()
        conn.close()
