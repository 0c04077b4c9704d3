"""OAUTHBEARER access tokens: fetched, cached and refreshed for every client of a process.

:class:`OAuthSettings` (plain data, from the Java client's configuration by
:mod:`mm2py.config.oauth`) says where tokens come from:

- OIDC client credentials (KIP-768): a POST of ``grant_type=client_credentials`` (and ``scope``)
  to ``sasl.oauthbearer.token.endpoint.url`` with the client id and secret as HTTP Basic
  credentials; the answer's ``access_token`` is a JWT whose ``exp`` says how long it lasts. An
  ``https`` endpoint is verified with the cluster's trust settings. A ``file:`` URL names a file
  holding the token (re-read at each refresh).
- Kafka's unsecured tokens (``alg: none``, development and tests) built from the login module's
  ``unsecuredLogin*`` options.

One :class:`TokenProvider` per distinct settings serves the whole process (:func:`token_provider`):
the raw client's connections (:meth:`TokenProvider.current`, without a thread when the cached
token is fresh) and confluent-kafka's ``oauth_cb`` (:meth:`TokenProvider.librdkafka_token`). A
token is refreshed when it is asked for after its refresh time (``sasl.login.refresh.*``, Java's
meanings). The first token of a provider fails at once when the endpoint is unreachable or refuses
the client (:class:`TokenError`, a :class:`~mm2py.errors.SecurityError`: never retried); a failed
refresh while the current token is still valid keeps that token, logs a warning and tries again
later. The client secret never appears in a message, a log line or a ``repr``.
"""

from __future__ import annotations

import asyncio
import base64
import gc
import logging
import random
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from mm2py.client.tls import TlsSettings, ssl_context
from mm2py.errors import SecurityError
from mm2py.protocol.errors import ProtocolError
from mm2py.protocol.oauthbearer import AccessToken, RefreshPolicy, parse_token, unsecured_token

log = logging.getLogger(__name__)
#: a failed refresh is tried again after this long (or sooner, before the current token expires)
RETRY_REFRESH_S = 10.0


class TokenError(SecurityError):
    """No access token could be had: the endpoint refused the client, could not be reached, or
    answered with something that is not a usable token."""


@dataclass(frozen=True)
class OAuthSettings:
    """Where a cluster's OAUTHBEARER tokens come from. Hashable plain data (no secret in ``repr``)."""

    #: ``None``: Kafka's unsecured tokens from ``unsecured``
    token_endpoint_url: str | None = None
    client_id: str = ""
    client_secret: str = field(default="", repr=False)
    scope: str | None = None
    #: SASL extensions sent with the token (``extension_<name>`` options)
    extensions: tuple[tuple[str, str], ...] = ()
    sub_claim: str = "sub"
    scope_claim: str = "scope"
    refresh: RefreshPolicy = field(default_factory=RefreshPolicy)
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 10.0
    #: ``sasl.oauthbearer.header.urlencode``: URL-encode id and secret in the Basic header
    header_urlencode: bool = False
    #: the ``unsecuredLogin*`` options of the unsecured login
    unsecured: tuple[tuple[str, str], ...] = ()
    #: trust for an ``https`` endpoint (the cluster's CAs; None: the system's)
    trust: TlsSettings | None = field(default=None, repr=False)
    #: the cluster's name, for messages
    cluster: str = ""

    @property
    def who(self) -> str:
        """The client as messages name it (never the secret)."""
        if self.token_endpoint_url is None:
            return "unsecured token"
        return f"client '{self.client_id}'" if self.client_id else "token file"


def _endpoint_reason(resp: httpx.Response, secret: str) -> str:
    text = resp.text.strip().replace("\n", " ")
    if secret:
        text = text.replace(secret, "[hidden]")
    return f"HTTP {resp.status_code} {resp.reason_phrase}" + (f": {text[:300]}" if text else "")


class TokenProvider:
    """The current token of one :class:`OAuthSettings`, fetched when needed (thread-safe)."""

    def __init__(self, settings: OAuthSettings, *, clock: Callable[[], float] = time.time,
                 rnd: Callable[[], float] = random.random) -> None:
        self.settings = settings
        self._clock, self._rnd = clock, rnd
        self._lock = threading.Lock()
        self._token: AccessToken | None = None
        self._refresh_at = 0.0
        self._http: httpx.Client | None = None
        #: tokens obtained so far (the first one and every refresh)
        self.fetches = 0

    def __repr__(self) -> str:
        return f"TokenProvider({self.settings.who}, cluster={self.settings.cluster!r})"

    def cached(self, fresh: float = 0.0) -> AccessToken | None:
        """The current token if it needs no refresh yet and has ``fresh`` (a fraction) of its
        lifetime left."""
        token, now = self._token, self._clock()
        if token is None or now >= self._refresh_at or token.expires_at - now < fresh * token.lifetime:
            return None
        return token

    def token(self, fresh: float = 0.0) -> AccessToken:
        """The current token, fetched first if there is none, its refresh time has come, or less
        than ``fresh`` (a fraction) of its lifetime is left."""
        with self._lock:
            now = self._clock()
            current = self._token
            if current is not None and now < self._refresh_at and (
                    current.expires_at - now >= fresh * current.lifetime):
                return current
            try:
                token = self._obtain(now)
            except TokenError as e:
                current = self._token
                if current is None or now >= current.expires_at:
                    raise
                self._refresh_at = now + min(RETRY_REFRESH_S, (current.expires_at - now) / 2)
                log.warning("%s; the current token stays in use (it expires in %.0f s)", e,
                            current.expires_at - now)
                return current
            self._token, self.fetches = token, self.fetches + 1
            self._refresh_at = self.settings.refresh.refresh_at(token, now, self._rnd())
            log.info("OAUTHBEARER token for %s of cluster '%s': principal '%s', valid for %.0f s, "
                     "refreshed in %.0f s", self.settings.who, self.settings.cluster, token.principal,
                     token.expires_at - now, self._refresh_at - now)
            return token

    async def current(self, fresh: float = 0.0) -> AccessToken:
        """:meth:`token` for the event loop: a fresh cached token at once, a fetch in a thread."""
        cached = self.cached(fresh)
        return cached if cached is not None else await asyncio.to_thread(self.token, fresh)

    def librdkafka_token(self, _config: str) -> tuple[str, float, str, dict[str, str]]:
        """confluent-kafka's ``oauth_cb``: (token, expiry in epoch seconds, principal, extensions).

        librdkafka asks again at 80% of the lifetime left of the token it was given, and
        re-authenticates (KIP-368) with the token it holds: a token with half its lifetime or less
        left is replaced first, so librdkafka never holds one whose sessions get ever shorter."""
        _HOLD.enter()  # first: no allocation of ours before the collector is off
        try:
            token = self.token(fresh=0.5)
            return token.value, token.expires_at, token.principal, dict(self.settings.extensions)
        finally:
            _HOLD.leave()

    def _obtain(self, now: float) -> AccessToken:
        s = self.settings
        try:
            if s.token_endpoint_url is None:
                return unsecured_token(dict(s.unsecured), now)
            if s.token_endpoint_url.startswith("file:"):
                path = Path(urllib.parse.urlparse(s.token_endpoint_url).path)
                try:
                    value = path.read_text().strip()
                except OSError as e:
                    raise TokenError(f"cannot read the OAUTHBEARER token file {path}: {e.strerror}") from None
            else:
                value = self._post()
            return parse_token(value, sub_claim=s.sub_claim, scope_claim=s.scope_claim, now=now)
        except (ProtocolError, ValueError) as e:
            raise TokenError(f"{self._what()}: {e}") from None

    def _what(self) -> str:
        s = self.settings
        where = f" from {s.token_endpoint_url}" if s.token_endpoint_url else ""
        return f"OAUTHBEARER token{where} for {s.who} of cluster '{s.cluster}'"

    def _client(self) -> httpx.Client:
        if self._http is None:
            s = self.settings
            verify = ssl_context(TlsSettings(
                ca_file=s.trust.ca_file if s.trust else None, ca_pem=s.trust.ca_pem if s.trust else None,
                check_hostname=s.trust.check_hostname if s.trust else True))
            timeout = httpx.Timeout(s.read_timeout_s, connect=s.connect_timeout_s)
            self._http = httpx.Client(verify=verify, timeout=timeout, trust_env=False)
        return self._http

    def _post(self) -> str:
        s = self.settings
        assert s.token_endpoint_url is not None
        ident, secret = s.client_id, s.client_secret
        if s.header_urlencode:
            ident, secret = urllib.parse.quote(ident, safe=""), urllib.parse.quote(secret, safe="")
        basic = base64.b64encode(f"{ident}:{secret}".encode()).decode()
        form = {"grant_type": "client_credentials", **({"scope": s.scope} if s.scope else {})}
        try:
            resp = self._client().post(s.token_endpoint_url, data=form, headers={
                "Authorization": f"Basic {basic}", "Accept": "application/json"})
        except httpx.HTTPError as e:
            reason = str(e.__cause__ or e) or type(e).__name__
            raise TokenError(f"{self._what()}: cannot reach the token endpoint: {reason}") from None
        if resp.status_code >= 400:
            reason = _endpoint_reason(resp, s.client_secret)
            raise TokenError(f"{self._what()}: the endpoint refused: {reason}")
        try:
            body = resp.json()
        except ValueError:
            body = None
        value = body.get("access_token") if isinstance(body, dict) else None
        if not isinstance(value, str) or not value:
            raise TokenError(f"{self._what()}: the endpoint's answer has no access_token "
                             f"({_endpoint_reason(resp, s.client_secret)})")
        return value

    def close(self) -> None:
        with self._lock:
            if self._http is not None:
                self._http.close()
                self._http = None


_PROVIDERS: dict[OAuthSettings, TokenProvider] = {}
_PROVIDERS_LOCK = threading.Lock()


def token_provider(settings: OAuthSettings) -> TokenProvider:
    """The process's provider for ``settings`` (one token cache for all clients that share them)."""
    with _PROVIDERS_LOCK:
        provider = _PROVIDERS.get(settings)
        if provider is None:
            provider = _PROVIDERS[settings] = TokenProvider(settings)
        return provider


def token_fetches() -> dict[str, int]:
    """Tokens obtained so far by this process's providers, per cluster name."""
    with _PROVIDERS_LOCK:
        providers = list(_PROVIDERS.values())
    out: dict[str, int] = {}
    for provider in providers:
        out[provider.settings.cluster] = out.get(provider.settings.cluster, 0) + provider.fetches
    return out


class _CollectionHold:
    """NO_COLLECTION_ON_LIBRDKAFKA_THREADS: librdkafka calls ``oauth_cb`` on a thread of its own
    (confluent-kafka serves it in the background, so tokens refresh without a poll). A cyclic
    garbage collection that happens to start there may destroy an unreachable client, and
    librdkafka aborts the process when a client is destroyed from one of its own threads ("Fatal
    Python error: Aborted", the collection inside the token fetch). So no collection starts while
    any such callback runs Python: the collector is held off, process-wide, from the first callback
    in until the last one out has left Python, and left as it was.

    The collector is switched back on by a thread of mm2py's own (``gc-hold``), once no thread that
    left is still in Python: switched on by the leaving callback itself, the next allocation of its
    own way out (the context manager's exit, say) could start the collection there (seen in a
    clean-clone run: the abort with "Garbage-collecting" in ``contextlib.__exit__``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: callbacks inside now
        self._inside = 0
        #: the collector was on and is held off: to be switched on again
        self._held = False
        #: threads whose callback left, maybe still running Python on the way out
        self._leaving: set[int] = set()
        self._wake = threading.Event()
        self._keeper: threading.Thread | None = None

    def enter(self) -> None:
        if _python_owned():
            return  # a collection here cannot be a client's own thread destroying it
        with self._lock:
            if not self._held and gc.isenabled():
                gc.disable()
                self._held = True
            self._inside += 1

    def leave(self) -> None:
        if _python_owned():
            return
        with self._lock:
            self._inside -= 1
            if not self._held:
                return
            self._leaving.add(threading.get_ident())
            if self._inside == 0:
                if self._keeper is None:
                    self._keeper = threading.Thread(target=self._keep, name="gc-hold", daemon=True)
                    self._keeper.start()
                self._wake.set()

    @property
    def held(self) -> bool:
        return self._held

    def _keep(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            while not self._release():
                time.sleep(0.001)

    def _release(self) -> bool:
        """Switch the collector on if no callback is inside and none that left is still in
        Python; True when there is nothing more to wait for (a callback inside wakes the keeper
        again when it leaves)."""
        in_python = sys._current_frames()
        with self._lock:
            self._leaving = {t for t in self._leaving if t in in_python}
            if self._inside:
                return True
            if self._leaving:
                return False
            if self._held:
                gc.enable()
                self._held = False
            return True


def _python_owned() -> bool:
    """Whether this thread was started by Python (not a librdkafka thread calling in: those get a
    dummy entry, or none). Looked up without allocating."""
    thread = threading._active.get(threading.get_ident())  # type: ignore[attr-defined]
    return thread is not None and not isinstance(thread, threading._DummyThread)


_HOLD = _CollectionHold()
