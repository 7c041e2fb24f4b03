"""What the manifest tests validate rendered Kubernetes objects against: the API schemas of every
Kubernetes version supported (strict: an unknown field is an error, as ``kubectl apply
--validate=strict`` makes it) and, for the Prometheus Operator objects, the fields of their CRDs."""

from __future__ import annotations

import copy
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import kubernetes_validate  # type: ignore[import-untyped]

# Kubernetes versions supported: the oldest still in common managed offerings to the newest.
VERSIONS = ("1.29", "1.31", "1.33", "1.35")
CRD_GROUP = "monitoring.coreos.com/"


# The fields of monitoring.coreos.com/v1 the shipped objects use, with their CRD's types;
# additionalProperties false, so a field the operator does not know fails here.
_RELABEL = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "sourceLabels": {"type": "array", "items": {"type": "string"}},
        "targetLabel": {"type": "string"},
        "action": {"type": "string"},
        "regex": {"type": "string"},
        "replacement": {"type": "string"},
    },
}
_META = {"type": "object", "required": ["name", "namespace"]}
# monitoring.coreos.com/v1 SecretKeySelector, SecretOrConfigMap, SafeTLSConfig and BasicAuth
_KEY_REF = {
    "type": "object",
    "required": ["key"],
    "additionalProperties": False,
    "properties": {"name": {"type": "string"}, "key": {"type": "string"}, "optional": {"type": "boolean"}},
}
_SECRET_OR_CM = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"secret": _KEY_REF, "configMap": _KEY_REF},
}
_TLS_VERSION = {"enum": ["TLS10", "TLS11", "TLS12", "TLS13"]}
_SAFE_TLS = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "ca": _SECRET_OR_CM,
        "cert": _SECRET_OR_CM,
        "keySecret": _KEY_REF,
        "serverName": {"type": "string"},
        "insecureSkipVerify": {"type": "boolean"},
        "minVersion": _TLS_VERSION,
        "maxVersion": _TLS_VERSION,
    },
}
_BASIC_AUTH = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"username": _KEY_REF, "password": _KEY_REF},
}
CRD_SCHEMAS = {
    "PodMonitor": {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "additionalProperties": False,
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "kind": {"const": "PodMonitor"},
            "metadata": _META,
            "spec": {
                "type": "object",
                "required": ["selector", "podMetricsEndpoints"],
                "additionalProperties": False,
                "properties": {
                    "selector": {"type": "object", "properties": {"matchLabels": {"type": "object"}}},
                    "namespaceSelector": {"type": "object"},
                    "podMetricsEndpoints": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {
                                "port": {"type": "string"},
                                "path": {"type": "string"},
                                "interval": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"},
                                "scrapeTimeout": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"},
                                "relabelings": {"type": "array", "items": _RELABEL},
                                "scheme": {"enum": ["http", "https", "HTTP", "HTTPS"]},
                                "tlsConfig": _SAFE_TLS,
                                "basicAuth": _BASIC_AUTH,
                            },
                        },
                    },
                },
            },
        },
    },
    "PrometheusRule": {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "additionalProperties": False,
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "kind": {"const": "PrometheusRule"},
            "metadata": _META,
            "spec": {
                "type": "object",
                "required": ["groups"],
                "additionalProperties": False,
                "properties": {
                    "groups": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "required": ["name", "rules"],
                            "additionalProperties": False,
                            "properties": {
                                "name": {"type": "string"},
                                "interval": {"type": "string"},
                                "rules": {
                                    "type": "array",
                                    "minItems": 1,
                                    "items": {
                                        "type": "object",
                                        "required": ["expr"],
                                        "additionalProperties": False,
                                        "properties": {
                                            "alert": {"type": "string"},
                                            "record": {"type": "string"},
                                            "expr": {"type": "string"},
                                            "for": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"},
                                            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                                            "annotations": {
                                                "type": "object",
                                                "additionalProperties": {"type": "string"},
                                            },
                                        },
                                    },
                                },
                            },
                        },
                    }
                },
            },
        },
    },
}
_SM: dict[str, Any] = copy.deepcopy(CRD_SCHEMAS["PodMonitor"])
_SM["properties"]["kind"] = {"const": "ServiceMonitor"}
_SM["properties"]["spec"]["required"] = ["selector", "endpoints"]
_SM_SPEC = _SM["properties"]["spec"]["properties"]
_SM_SPEC["endpoints"] = _SM_SPEC.pop("podMetricsEndpoints")
CRD_SCHEMAS["ServiceMonitor"] = _SM


def split(docs: list[dict]) -> tuple[list[dict], list[dict]]:
    """(built-in objects, Prometheus Operator objects)."""
    crd = [d for d in docs if d["apiVersion"].startswith(CRD_GROUP)]
    return [d for d in docs if not d["apiVersion"].startswith(CRD_GROUP)], crd


def validate(doc: dict, version: str) -> None:
    """Raises when ``doc`` is not a valid object (for ``version``, or for its CRD)."""
    if doc["apiVersion"].startswith(CRD_GROUP):
        jsonschema.validate(doc, CRD_SCHEMAS[doc["kind"]])
    else:
        kubernetes_validate.validate(doc, version, strict=True)
