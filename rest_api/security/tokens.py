"""Bearer tokens (JWT) checked against an OIDC issuer's JSON Web Key Set (mm2py's addition; Kafka
Connect has no token login). PyJWT's JWKS client keeps the keys for
``mm2py.rest.jwt.jwks.cache.seconds`` and reads them again for a key id it does not know (the
issuer rotated its keys), at most every ``mm2py.rest.jwt.jwks.refresh.cooldown.seconds``; it reads
them in a thread, never on the event loop.

A token is valid when an asymmetric algorithm signed it with one of the issuer's keys, it has not
expired, and its ``iss`` and ``aud`` are those set (when set). The caller is the token's
``mm2py.rest.jwt.principal.claim`` (``sub``); a true ``mm2py.rest.jwt.read.only.claim`` makes the
caller read-only. Neither the token nor its claims are logged.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import Any

from mm2py.rest_api.security.guard import Caller, UnauthenticatedError
from mm2py.rest_api.security.settings import JwtSettings

__all__ = ["JwksTokens"]

log = logging.getLogger("mm2py.rest.tokens")
#: signatures by a key of the issuer's JWKS only: never "none", never a shared secret (HS*)
_ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"]


class JwksTokens:
    """Tokens checked against the JWKS at ``settings.jwks_url``."""

    def __init__(self, settings: JwtSettings) -> None:
        import jwt

        self.settings = settings
        context = ssl.create_default_context(cafile=settings.ca_location) if settings.ca_location else None
        self._jwks = jwt.PyJWKClient(settings.jwks_url, cache_jwk_set=True,
                                     lifespan=settings.jwks_cache_seconds, timeout=10, ssl_context=context,
                                     cooldown_duration=settings.jwks_refresh_cooldown_seconds)

    async def caller(self, token: str) -> Caller:
        import jwt

        try:
            key = await asyncio.to_thread(self._jwks.get_signing_key_from_jwt, token)
            claims: dict[str, Any] = jwt.decode(
                token, key.key, algorithms=_ALGORITHMS, audience=self.settings.audience,
                issuer=self.settings.issuer,
                options={"require": ["exp"], "verify_aud": self.settings.audience is not None})
        except jwt.PyJWKClientConnectionError as exc:
            log.warning("cannot read the token issuer's keys from %s: %s", self.settings.jwks_url, exc)
            raise UnauthenticatedError("the token cannot be checked now: the issuer's keys are out of "
                                       "reach") from None
        except (jwt.InvalidTokenError, jwt.PyJWKClientError) as exc:
            raise UnauthenticatedError(f"the bearer token is not accepted: {exc}") from None
        name = claims.get(self.settings.principal_claim)
        if not isinstance(name, str) or not name:
            claim = self.settings.principal_claim
            raise UnauthenticatedError(f"the bearer token has no {claim!r} claim naming the caller")
        read_only = claims.get(self.settings.read_only_claim) in (True, "true")
        return Caller(name, read_only=read_only)
