"""The fields of Strimzi's ``KafkaMirrorMaker2`` resource (its CRD, ``kafka.strimzi.io/v1`` and the
older ``v1beta2``), checked before :mod:`mm2py.config.strimzi` maps them: an unknown or mistyped
field is a :class:`ConfigError` naming its full path (``spec.mirrors[0].topicPatern: unknown field
(did you mean 'topicsPattern'?)``); a field of the other API version says so. Also the reasons
given for the fields that mean nothing to mm2py (:data:`IGNORED`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mm2py.config.errors import ConfigError, did_you_mean

__all__ = ["IGNORED", "check_resource"]

#: a value taken as it is (free-form objects: ``config``, ``template``, ``metadata``...)
ANY = "any"
_STR, _INT, _BOOL = "string", "integer", "boolean"

_SECRET_KEY = {"secretName": _STR, "key": _STR}
_CERTS = [{"secretName": _STR, "certificate": _STR, "pattern": _STR}]
_AUTH = {
    "type": _STR, "username": _STR, "passwordSecret": {"secretName": _STR, "password": _STR},
    "certificateAndKey": {"secretName": _STR, "certificate": _STR, "key": _STR},
    "sasl": _BOOL, "config": ANY,
    # type: oauth (v1beta2 only)
    "tokenEndpointUri": _STR, "clientId": _STR, "clientSecret": _SECRET_KEY, "scope": _STR,
    "audience": _STR, "accessToken": _SECRET_KEY, "accessTokenIsJwt": _BOOL,
    "accessTokenLocation": _STR, "refreshToken": _SECRET_KEY, "clientAssertion": _SECRET_KEY,
    "clientAssertionLocation": _STR, "clientAssertionType": _STR, "grantType": _STR,
    "saslExtensions": ANY, "tlsTrustedCertificates": _CERTS, "disableTlsHostnameVerification": _BOOL,
    "connectTimeoutSeconds": _INT, "readTimeoutSeconds": _INT, "httpRetries": _INT,
    "httpRetryPauseMs": _INT, "maxTokenExpirySeconds": _INT, "enableMetrics": _BOOL,
    "includeAcceptHeader": _BOOL,
}
_CLUSTER = {"alias": _STR, "bootstrapServers": _STR, "tls": {"trustedCertificates": _CERTS},
            "authentication": _AUTH, "config": ANY}
_TARGET = {**_CLUSTER, "groupId": _STR, "configStorageTopic": _STR, "statusStorageTopic": _STR,
           "offsetStorageTopic": _STR}
_CONNECTOR = {
    "tasksMax": _INT, "pause": _BOOL, "version": _STR, "config": ANY, "state": _STR,
    "autoRestart": {"enabled": _BOOL, "maxRestarts": _INT},
    "listOffsets": {"toConfigMap": {"name": _STR}}, "alterOffsets": {"fromConfigMap": {"name": _STR}},
}
_MIRROR = {
    "sourceCluster": _STR, "targetCluster": _STR, "source": _CLUSTER,
    "sourceConnector": _CONNECTOR, "checkpointConnector": _CONNECTOR, "heartbeatConnector": _CONNECTOR,
    "topicsPattern": _STR, "topicsExcludePattern": _STR, "topicsBlacklistPattern": _STR,
    "groupsPattern": _STR, "groupsExcludePattern": _STR, "groupsBlacklistPattern": _STR,
}
_SPEC = {
    "version": _STR, "replicas": _INT, "image": _STR, "connectCluster": _STR, "clusters": [_CLUSTER],
    "target": _TARGET, "mirrors": [_MIRROR], "clientRackInitImage": _STR,
    **{k: ANY for k in ("resources", "livenessProbe", "readinessProbe", "jvmOptions", "jmxOptions",
                        "logging", "rack", "metricsConfig", "tracing", "template", "externalConfiguration")},
}
_ROOT = {"apiVersion": _STR, "kind": _STR, "metadata": ANY, "spec": _SPEC, "status": ANY}

#: fields of v1beta2 that v1 no longer has (generic paths: ``[]`` for any index)
_V1BETA2_ONLY = frozenset({
    "spec.connectCluster", "spec.clusters", "spec.externalConfiguration",
    "spec.mirrors[].sourceCluster", "spec.mirrors[].targetCluster", "spec.mirrors[].heartbeatConnector",
    "spec.mirrors[].topicsBlacklistPattern", "spec.mirrors[].groupsBlacklistPattern",
    *(f"spec.mirrors[].{c}.pause" for c in ("sourceConnector", "checkpointConnector")),
    *(f"{owner}.authentication.{k}"
      for owner in ("spec.clusters[]", "spec.target", "spec.mirrors[].source")
      for k in ("tokenEndpointUri", "clientId", "clientSecret", "scope", "audience", "accessToken",
                "accessTokenIsJwt", "accessTokenLocation", "refreshToken", "clientAssertion",
                "clientAssertionLocation", "clientAssertionType", "grantType", "saslExtensions",
                "tlsTrustedCertificates", "disableTlsHostnameVerification", "connectTimeoutSeconds",
                "readTimeoutSeconds", "httpRetries", "httpRetryPauseMs", "maxTokenExpirySeconds",
                "enableMetrics", "includeAcceptHeader")),
})
_POD = "a setting of the Kafka Connect pods Strimzi deploys; mm2py's process is deployed by you"
#: why each field is ignored, by its name (the last part of its path)
IGNORED = {
    "version": "the Kafka (Connect) version Strimzi deploys; mm2py speaks the Kafka protocol itself",
    "replicas": "the number of Kafka Connect pods; mm2py runs the flows in the process(es) you start "
                "(a flow's parallelism is sourceConnector.tasksMax)",
    "image": _POD, "clientRackInitImage": _POD, "resources": _POD, "livenessProbe": _POD,
    "readinessProbe": _POD, "template": _POD,
    "jvmOptions": "JVM options: mm2py is not a Java program",
    "jmxOptions": "JMX: mm2py is not a Java program",
    "logging": "Kafka Connect's log4j configuration; mm2py logs through Python's logging",
    "metricsConfig": "the Prometheus JMX exporter of Kafka Connect; mm2py serves its own /metrics on its "
                     "REST API",
    "tracing": "OpenTelemetry interceptors of the Java clients; mm2py has none",
    "rack": "rack awareness (client.rack from the node's topology label) is not applied; set "
            "<alias>.consumer.client.rack yourself if wanted",
    "externalConfiguration": "environment variables and volumes of the Connect pods; mm2py reads secrets "
                             "from its secrets directory",
    "status": "written by the Strimzi operator",
    "groupId": "the Kafka Connect group; mm2py runs no Connect cluster",
    "configStorageTopic": "a Kafka Connect internal topic; mm2py keeps no connector configurations in Kafka",
    "statusStorageTopic": "a Kafka Connect internal topic; mm2py reports status over its REST API",
    "offsetStorageTopic": "a Kafka Connect internal topic; mm2py keeps a flow's positions in "
                          "mm2-offsets.<source>.internal on the target, as MirrorMaker 2's dedicated mode "
                          "(mm2py flow-offsets import takes over the positions kept in it)",
    "autoRestart": "Kafka Connect's automatic restart of a failed connector; mm2py has no such policy "
                   "(restart a failed flow over its REST API)",
    "listOffsets": "Kafka Connect's offsets ConfigMaps; use mm2py's offsets commands",
    "alterOffsets": "Kafka Connect's offsets ConfigMaps; use mm2py's offsets commands",
}


def check_resource(doc: Mapping[str, Any], api_version: str) -> None:
    """Every field of ``doc`` is one of the CRD's, of the right type, for ``api_version``."""
    legacy = api_version != "kafka.strimzi.io/v1"  # v1beta2 and before: spec.clusters...
    _walk(doc, _ROOT, "", "", legacy, api_version)


def _type_name(value: Any) -> str:
    return {dict: "an object", list: "a list", bool: "a boolean", int: "an integer",
            str: "a string"}.get(type(value), type(value).__name__)


def _walk(value: Any, schema: Any, path: str, generic: str, beta: bool, api_version: str) -> None:
    shown = path or "the resource"
    if schema == ANY or value is None:
        return
    if isinstance(schema, list):
        if not isinstance(value, list):
            raise ConfigError(f"{shown}: expected a list, got {_type_name(value)}", path)
        for i, item in enumerate(value):
            _walk(item, schema[0], f"{path}[{i}]", f"{generic}[]", beta, api_version)
        return
    if isinstance(schema, dict):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{shown}: expected an object, got {_type_name(value)}", path)
        for key, sub in value.items():
            where = f"{path}.{key}" if path else str(key)
            generic_key = f"{generic}.{key}" if generic else str(key)
            if key not in schema:
                raise ConfigError(f"{where}: unknown field{did_you_mean(str(key), schema)}", where)
            if generic_key in _V1BETA2_ONLY and not beta:
                raise ConfigError(f"{where}: not a field of {api_version} (it was one of "
                                  "kafka.strimzi.io/v1beta2)", where)
            _walk(sub, schema[key], where, generic_key, beta, api_version)
        return
    expected = {_STR: str, _INT: int, _BOOL: bool}[schema]
    if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
        raise ConfigError(f"{shown}: expected {schema}, got {_type_name(value)} {value!r}", path)
