"""`fa-sim --issuer URL --app-key FILE`: the simulator acting as the app's backend (docs/identities.md).

For each simulated device it mints the enrolment credential an app backend would sign for that install (the install
is the device's id), and it pins the keys the issuer publishes in every device's policy, so that the fleet
registers with identity tokens and counts only credentialed peers toward its `min_cohort`.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from nacl.signing import SigningKey

from device_sdk.identity import Enrolment
from fa_common.keyfile import KeyFileError, read_seed
from fa_issuer.attesters import mint_credential
from queries.envelope import device_id_for

CREDENTIAL_VALID_S = 30 * 86400


class EnrolmentSetupError(Exception):
    """The issuer cannot be used (unreachable, no keys) or the app key cannot be read."""


def issuer_keys(issuer_url: str, timeout_s: float = 15.0) -> list[str]:
    """The base64 SubjectPublicKeyInfo keys `GET /v1/issuer/keys` lists."""
    try:
        with urllib.request.urlopen(issuer_url.rstrip("/") + "/v1/issuer/keys", timeout=timeout_s) as r:
            body = json.loads(r.read())
        keys = [k["public_key"] for k in body["keys"]]
    except (OSError, urllib.error.URLError, ValueError, KeyError, TypeError) as exc:
        raise EnrolmentSetupError(f"--issuer: cannot read the issuer's keys at {issuer_url}: {exc}") from None
    if not keys or not all(isinstance(k, str) for k in keys):
        raise EnrolmentSetupError(f"--issuer: {issuer_url} lists no keys")
    return keys


def enrolments(issuer_url: str, app_key_file: str, app: str,
               devices: Sequence[tuple[bytes, dict[str, list[Any]]]]) -> list[Enrolment]:
    """One enrolment per device: the credential the app backend (key in `app_key_file`) signs for its install."""
    try:
        key = SigningKey(read_seed(app_key_file))
    except KeyFileError as exc:
        raise EnrolmentSetupError(f"--app-key: {exc}") from None
    not_after = int(time.time()) + CREDENTIAL_VALID_S
    out = []
    for identity, _ in devices:
        public = Ed25519PrivateKey.from_private_bytes(identity).public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        out.append(Enrolment(issuer_url, mint_credential(key, app, device_id_for(public), not_after)))
    return out
