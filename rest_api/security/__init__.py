"""Securing the REST API with Kafka Connect's own keys: ``listeners`` over HTTPS
(:mod:`~mm2py.rest_api.security.tls`), Connect's Basic authentication extension with its JAAS and
users files (:mod:`~mm2py.rest_api.security.basic`), bearer tokens checked against an OIDC issuer's
JWKS (:mod:`~mm2py.rest_api.security.tokens`), read-only callers and one audit line per change
(:mod:`~mm2py.rest_api.security.guard`, :mod:`~mm2py.rest_api.security.audit`); the settings read
from the worker's configuration (:mod:`~mm2py.rest_api.security.settings`)."""
