"""What Kubernetes accepts as a name, a label, a quantity and an image reference, checked before
anything reaches the API server. Pure; each check returns the value or raises ValueError with
the house's wording ("expected ...; got ...").

The grammars are Kubernetes' own: ``IsDNS1123Label``/``IsDNS1123Subdomain``,
``IsQualifiedName``/``IsValidLabelValue`` (apimachinery's ``util/validation``), the quantity
syntax of ``api/resource/quantity.go`` and the image reference of ``distribution/reference``."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

LABEL_MAX = 63  # a DNS-1123 label, a label value, a qualified name's name part
SUBDOMAIN_MAX = 253  # a DNS-1123 subdomain (most object names), a label key's prefix

_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_QUALIFIED = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_SECRET_KEY = re.compile(r"[-._a-zA-Z0-9]+")

# <signedNumber><suffix>: binary (Ki..Ei), a decimal exponent (e3), or decimal SI (m, k..E)
_QUANTITY = re.compile(r"(?P<number>[0-9]+(\.[0-9]*)?|\.[0-9]+)"
                       r"(?P<suffix>[KMGTPE]i|[eE][+-]?[0-9]+|[mkMGTPE]?)")
_BINARY = {f"{p}i": Decimal(1024) ** (n + 1) for n, p in enumerate("KMGTPE")}
_DECIMAL = {"": Decimal(1), "m": Decimal("0.001"), "k": Decimal(10) ** 3, "M": Decimal(10) ** 6,
            "G": Decimal(10) ** 9, "T": Decimal(10) ** 12, "P": Decimal(10) ** 15,
            "E": Decimal(10) ** 18}
QUANTITY_EXAMPLES = "8, 500m, 64Gi or 1.5e3"

# distribution/reference: [domain[:port]/]path[:tag][@digest], the path in lower case
_ALNUM = r"[a-z0-9]+"
_PATH = rf"{_ALNUM}(?:(?:[._]|__|-+){_ALNUM})*(?:/{_ALNUM}(?:(?:[._]|__|-+){_ALNUM})*)*"
_HOST_PART = r"(?:[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9])"
_DOMAIN = rf"(?:{_HOST_PART}(?:\.{_HOST_PART})*|\[[0-9A-Fa-f:.]+\])(?::[0-9]+)?"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9A-Fa-f]{32,}"
_IMAGE = re.compile(rf"(?:{_DOMAIN}/)?{_PATH}(?::{_TAG})?(?:@{_DIGEST})?")
IMAGE_MAX = 512


def dns_label(value: str, what: str = "a name") -> str:
    """An RFC 1123 label: a namespace, a volume's or a Service's name (lower case letters, digits
    and '-', starting and ending with a letter or digit, at most 63 characters)."""
    if len(value) > LABEL_MAX or not _LABEL.fullmatch(value):
        raise ValueError(f"expected {what} that Kubernetes accepts (RFC 1123: lower case letters, "
                         f"digits and '-', starting and ending with a letter or digit, at most "
                         f"{LABEL_MAX} characters); got {value!r}")
    return value


def dns_subdomain(value: str, what: str = "a name") -> str:
    """An RFC 1123 subdomain: a Secret's, a claim's, a service account's, a priority class's name
    (RFC 1123 labels joined by '.', at most 253 characters)."""
    if len(value) > SUBDOMAIN_MAX or not _SUBDOMAIN.fullmatch(value):
        raise ValueError(f"expected {what} that Kubernetes accepts (RFC 1123: lower case letters, "
                         f"digits, '-' and '.', starting and ending with a letter or digit, at "
                         f"most {SUBDOMAIN_MAX} characters); got {value!r}")
    return value


def label_key(value: str) -> str:
    """A label's (or a node selector's) key: ``[prefix/]name``, the prefix a DNS subdomain."""
    prefix, slash, name = value.rpartition("/")
    if ((slash and (not prefix or len(prefix) > SUBDOMAIN_MAX or not _SUBDOMAIN.fullmatch(prefix)))
            or len(name) > LABEL_MAX or not _QUALIFIED.fullmatch(name)):
        raise ValueError("expected a label key like 'team' or 'example.com/team' (a name of "
                         "letters, digits, '-', '_' and '.', at most 63 characters, after an "
                         f"optional DNS subdomain and '/'); got {value!r}")
    return value


def label_value(value: str) -> str:
    """A label's value: empty, or letters, digits, '-', '_' and '.', starting and ending with a
    letter or digit, at most 63 characters."""
    if len(value) > LABEL_MAX or not _LABEL_VALUE.fullmatch(value):
        raise ValueError("expected a label value (letters, digits, '-', '_' and '.', starting and "
                         f"ending with a letter or digit, at most 63 characters); got {value!r}")
    return value


def as_label_value(text: str, fallback: str = "unknown") -> str:
    """``text`` made a label value: each character a label cannot hold becomes '_', cut to 63
    characters, trimmed to start and end with a letter or digit (``fallback`` when none is
    left). For what Kubernetes must show but fsdp-orch did not choose: a user's login name."""
    kept = re.sub(r"[^A-Za-z0-9_.-]", "_", text)[:LABEL_MAX]
    kept = re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", kept)
    return kept or fallback


def secret_key(value: str) -> str:
    """A key of a Secret's data: letters, digits, '-', '_' and '.'."""
    if len(value) > SUBDOMAIN_MAX or not _SECRET_KEY.fullmatch(value):
        raise ValueError("expected a key of a Kubernetes Secret (letters, digits, '-', '_' and "
                         f"'.'); got {value!r}")
    return value


def quantity_text(value: Any) -> Any:
    """A quantity as YAML gives it (``cpu: 8``, ``cpu: 0.5``) as the text Kubernetes reads; a
    boolean is refused (YAML reads ``yes`` as true)."""
    if isinstance(value, bool):
        raise ValueError(f"expected a Kubernetes quantity like {QUANTITY_EXAMPLES}; "
                         f"got {str(value).lower()}")
    if isinstance(value, (int, float)):
        return str(value)
    return value


def quantity(text: str) -> Decimal:
    """The value of a Kubernetes quantity (``500m`` is 0.5, ``64Gi`` is 64 * 2**30); a
    ValueError for anything ``resource.ParseQuantity`` would refuse, and for a negative one."""
    found = _QUANTITY.fullmatch(text.strip()) if len(text) <= 64 else None
    if found is None:
        raise ValueError(f"expected a Kubernetes quantity like {QUANTITY_EXAMPLES}; "
                         f"got {text!r}")
    suffix = found["suffix"]
    try:
        number = Decimal(found["number"])
        if suffix in _BINARY:
            return number * _BINARY[suffix]
        if suffix[:1] in ("e", "E") and len(suffix) > 1:
            return number.scaleb(int(suffix[1:]))
        return number * _DECIMAL[suffix]
    except (ArithmeticError, InvalidOperation, ValueError):
        raise ValueError(f"expected a Kubernetes quantity like {QUANTITY_EXAMPLES}; "
                         f"got {text!r}") from None


def image_reference(value: str) -> str:
    """An image reference a kubelet can pull: ``[registry[:port]/]path[:tag][@digest]``."""
    if len(value) <= IMAGE_MAX and _IMAGE.fullmatch(value):
        return value
    hint = ""
    if len(value) <= IMAGE_MAX and _IMAGE.fullmatch(_lower_path(value)):
        hint = " (the repository's path must be lower case)"
    raise ValueError("expected an image reference like 'nvcr.io/nvidia/pytorch:25.01-py3' or "
                     f"'registry:5000/team/train@sha256:<hex>'{hint}; got {value!r}")


def _lower_path(value: str) -> str:
    """``value`` with the part a repository path would be in lower case (to say why it failed)."""
    name, at, digest = value.partition("@")
    head, colon, tag = name.rpartition(":")
    if colon and "/" not in tag:
        return head.lower() + colon + tag + at + digest
    return name.lower() + at + digest


__all__ = ["LABEL_MAX", "QUANTITY_EXAMPLES", "as_label_value", "dns_label", "dns_subdomain",
           "image_reference", "label_key", "label_value", "quantity", "quantity_text",
           "secret_key"]
