"""The grammars of the strings a TTSService carries: Kubernetes names, image references, hub ids.

Each is a pydantic `Annotated` string type whose `pattern` and `maxLength` land in
the CRD, so the API server and `ttsfleet render` refuse the same strings. The
patterns are RE2 (Go's regexp on the API server, Rust's regex in pydantic, RE2 in
celpy): `$` is the end of the text, never "before a final newline"; and no `\\d`
or `\\w`, whose meaning is ASCII in Go but Unicode in Rust.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field

from ttsfleet_runtime import model_cache

# Kubernetes (apimachinery validation): a DNS-1123 label, a DNS-1123 subdomain and a
# DNS-1035 label (a label that starts with a letter, as Service names must).
_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_LABEL = f"^{_LABEL}$"
DNS1123_SUBDOMAIN = rf"^{_LABEL}(\.{_LABEL})*$"
DNS1035_LABEL = "^[a-z]([-a-z0-9]*[a-z0-9])?$"
DNS_LABEL_MAX = 63
DNS_SUBDOMAIN_MAX = 253

# A label value (may be empty) and a label key (qualified name: an optional DNS
# subdomain prefix and `/`, then a name of at most 63 characters).
LABEL_VALUE = "^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
LABEL_KEY = rf"^({_LABEL}(\.{_LABEL})*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{{0,61}}[A-Za-z0-9])?$"
LABEL_KEY_MAX = DNS_SUBDOMAIN_MAX + 1 + DNS_LABEL_MAX

# An image reference by the distribution (Docker) reference grammar:
# [host[:port]/]path[/path...][:tag][@digest], path components lowercase.
_PATH_COMPONENT = "[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*"
_DOMAIN_COMPONENT = "(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
_TAG = "[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST = "[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
IMAGE_REFERENCE = (
    rf"^(?:{_HOST}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*(?::{_TAG})?(?:@{_DIGEST})?$"
)
IMAGE_REFERENCE_MAX = 512

# Hub repository ids and revisions: the runtime's `fetch` refuses the same strings.
HUB_REPO_ID = model_cache.HUB_REPO_ID
HUB_REPO_ID_MAX = model_cache.HUB_REPO_ID_MAX
HUB_REVISION = model_cache.HUB_REVISION
HUB_REVISION_MAX = model_cache.HUB_REVISION_MAX

# An absolute directory inside a volume: `/`-separated names of safe characters, no
# empty components. `..` components are refused by a CEL rule (with its own message).
VOLUME_PATH = r"^/([A-Za-z0-9._@+-]+(/[A-Za-z0-9._@+-]+)*/?)?$"
VOLUME_PATH_MAX = 1024

# An environment variable name as a shell (and POSIX) knows it.
ENV_NAME = "^[A-Za-z_][A-Za-z0-9_]*$"
ENV_NAME_MAX = 128

# A key of a Secret or ConfigMap.
SECRET_KEY = "^[-._a-zA-Z0-9]+$"
SECRET_KEY_MAX = 253

# A byte count as Kubernetes quantities spell it: `40Gi`, `512M`, `1.5Ti`.
BYTE_QUANTITY = r"^[0-9]+(\.[0-9]+)?([KMGTPE]i?)?$"
BYTE_QUANTITY_MAX = 32

DnsLabel = Annotated[str, Field(min_length=1, max_length=DNS_LABEL_MAX, pattern=DNS1123_LABEL)]
DnsSubdomain = Annotated[
    str, Field(min_length=1, max_length=DNS_SUBDOMAIN_MAX, pattern=DNS1123_SUBDOMAIN)
]
LabelValue = Annotated[str, Field(max_length=DNS_LABEL_MAX, pattern=LABEL_VALUE)]
LabelKey = Annotated[str, Field(min_length=1, max_length=LABEL_KEY_MAX, pattern=LABEL_KEY)]
ImageReference = Annotated[
    str, Field(min_length=1, max_length=IMAGE_REFERENCE_MAX, pattern=IMAGE_REFERENCE)
]
HubRepoId = Annotated[str, Field(min_length=3, max_length=HUB_REPO_ID_MAX, pattern=HUB_REPO_ID)]
HubRevision = Annotated[str, Field(min_length=1, max_length=HUB_REVISION_MAX, pattern=HUB_REVISION)]
VolumePath = Annotated[str, Field(min_length=1, max_length=VOLUME_PATH_MAX, pattern=VOLUME_PATH)]
EnvName = Annotated[str, Field(min_length=1, max_length=ENV_NAME_MAX, pattern=ENV_NAME)]
SecretKey = Annotated[str, Field(min_length=1, max_length=SECRET_KEY_MAX, pattern=SECRET_KEY)]
ByteQuantity = Annotated[str, Field(max_length=BYTE_QUANTITY_MAX, pattern=BYTE_QUANTITY)]


def is_dns_label(value: str) -> bool:
    """A DNS-1123 label, such as a namespace name."""
    return len(value) <= DNS_LABEL_MAX and re.fullmatch(DNS1123_LABEL, value) is not None
