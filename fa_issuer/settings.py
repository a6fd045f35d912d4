"""Issuer settings from environment variables (prefix `FA_ISSUER_`) and `fa-issuer serve` flags (flags win)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from fa_common.b64 import b64d

APP_KEY_BYTES = 32
MAX_APP_NAME = 64
BODY_LIMIT = 4096
"""Bytes; a larger request body gets 413 (a token request is about 1.6 KiB)."""


class SettingsError(ValueError):
    """A setting that does not parse; the message names it."""


def parse_app_key(entry: str) -> tuple[str, bytes]:
    """`NAME=base64(Ed25519 public key, 32 bytes)` → (name, key); SettingsError naming what is wrong."""
    name, sep, b64 = entry.strip().partition("=")
    name = name.strip()
    if not sep or not name:
        raise SettingsError(f"app key {entry[:80]!r}: expected NAME=BASE64_PUBLIC_KEY")
    if len(name) > MAX_APP_NAME or not name.isprintable():
        raise SettingsError(f"app key {name[:80]!r}: the app name must be 1-{MAX_APP_NAME} printable characters")
    try:
        return name, b64d(b64.strip(), f"app key {name!r}: the Ed25519 public key", APP_KEY_BYTES)
    except ValueError as exc:
        raise SettingsError(str(exc)) from None


class IssuerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FA_ISSUER_", extra="ignore")

    key_file: Path = Field(default=Path("issuer-key.pem"), description="the issuer's RSA key (PEM; `fa-issuer keygen`)")
    db_path: Path = Field(default=Path("issuer.db"), description="the issuer's own SQLite file (quota records)")
    app_keys: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="app backends' public keys, `NAME=BASE64` (Ed25519, 32 bytes); in the environment comma-separated",
    )
    tokens_per_day: int = Field(default=1, ge=1, le=1_000_000, description="tokens per (app, install) per rolling 24 h")
    address_rate_per_min: float = Field(
        default=60.0, ge=0, description="token requests per minute per client address (IPv4 /32, IPv6 /64); 0 = no limit"
    )
    address_burst: int = Field(default=20, ge=1, description="token requests one address may make at once")
    host: str = "127.0.0.1"
    port: int = Field(default=8100, ge=0, le=65535)

    @field_validator("app_keys", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part for part in value.replace("\n", ",").split(",") if part.strip()]
        return value

    @field_validator("app_keys")
    @classmethod
    def _check(cls, value: list[str]) -> list[str]:
        names = [parse_app_key(entry)[0] for entry in value]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise SettingsError(f"app {sorted(dup)[0]!r} is configured more than once")
        return value

    def app_public_keys(self) -> dict[str, bytes]:
        return dict(parse_app_key(entry) for entry in self.app_keys)
