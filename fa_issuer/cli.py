"""`fa-issuer`: keygen, serve, app-key, credential (docs/issuer.md).

    fa-issuer keygen --key FILE
    fa-issuer serve --key FILE --db FILE --app NAME=PUBLIC_KEY ... [--host H] [--port P] [--tokens-per-day N]
    fa-issuer app-key [--out FILE]
    fa-issuer public-key (--key FILE | --app-key FILE)
    fa-issuer credential --app-key FILE --app NAME --install ID [--valid-days D]

Settings not given as flags come from `FA_ISSUER_*` variables (fa_issuer/settings.py). A failure is one line
on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from aiohttp import web
from nacl.signing import SigningKey
from pydantic import ValidationError

from fa_common.b64 import b64e
from fa_common.keyfile import KeyFileError, read_seed, write_seed
from fa_common.ratelimit import AddressRateLimiter
from fa_issuer import keys
from fa_issuer.app import Issuer, create_app
from fa_issuer.attesters import SEED_BYTES, AppBackendAttester, mint_credential, new_app_key
from fa_issuer.quota import QuotaStore, QuotaStoreError
from fa_issuer.settings import IssuerSettings, SettingsError

EXIT_USAGE = 2
DEFAULT_VALID_DAYS = 30.0


class CliError(Exception):
    """A failure reported as one line and exit code 2."""


def settings_from(args: argparse.Namespace) -> IssuerSettings:
    pairs = {"key_file": args.key, "db_path": args.db, "app_keys": args.app or None, "host": args.host,
             "port": args.port, "tokens_per_day": args.tokens_per_day, "address_rate_per_min": args.rate_per_min,
             "address_burst": args.burst}
    try:
        return IssuerSettings(**{k: v for k, v in pairs.items() if v is not None})
    except ValidationError as exc:
        parts = [f"{'.'.join(str(x) for x in e['loc']) or 'settings'}: {e['msg']}" for e in exc.errors(include_url=False)]
        raise CliError("invalid setting: " + "; ".join(parts)) from None
    except SettingsError as exc:
        raise CliError(f"invalid setting: {exc}") from None


def cmd_keygen(args: argparse.Namespace) -> None:
    key = keys.generate(Path(args.key))
    print(f"wrote {args.key} (mode 0600); token_key_id {b64e(key.token_key_id)}")


def cmd_serve(args: argparse.Namespace) -> None:
    settings = settings_from(args)
    key = keys.load(settings.key_file)
    apps = settings.app_public_keys()
    if not apps:
        raise CliError("no app backend keys: give --app NAME=PUBLIC_KEY (see `fa-issuer app-key`) or FA_ISSUER_APP_KEYS")
    quota = QuotaStore(settings.db_path, settings.tokens_per_day)
    rate = settings.address_rate_per_min
    limiter = AddressRateLimiter(rate, settings.address_burst) if rate > 0 else None
    issuer = Issuer.with_key(key, AppBackendAttester(apps), quota, limiter)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    url = f"http://{settings.host}:{settings.port}"
    print(f"fa-issuer serving on {url}", flush=True)
    print(f"token_key_id {b64e(key.token_key_id)}; apps {', '.join(sorted(apps))}; "
          f"{settings.tokens_per_day} token(s) per install per 24 h", flush=True)
    web.run_app(create_app(issuer), host=settings.host, port=settings.port, print=None, access_log=None)


def cmd_app_key(args: argparse.Namespace) -> None:
    key = new_app_key()
    public = b64e(bytes(key.verify_key))
    if args.out:
        write_seed(args.out, bytes(key))
        print(f"wrote the private key to {args.out}")
    else:
        print(f"private_key {b64e(bytes(key))}")
    print(f"public_key {public}")


def load_app_key(path: str) -> SigningKey:
    """An app backend key file: the 32-byte Ed25519 seed `app-key --out` wrote (fa_common.keyfile)."""
    return SigningKey(read_seed(path, SEED_BYTES))


def cmd_public_key(args: argparse.Namespace) -> None:
    if args.key:
        print(b64e(keys.load(Path(args.key)).public_der))  # what apps pin (DevicePolicy issuer_keys), FA_ISSUER_KEYS
    else:
        print(b64e(bytes(load_app_key(args.app_key).verify_key)))  # what `serve --app NAME=…` takes


def cmd_credential(args: argparse.Namespace) -> None:
    key = load_app_key(args.app_key)
    try:
        print(mint_credential(key, args.app, args.install, int(time.time() + args.valid_days * 86400)))
    except ValueError as exc:
        raise CliError(str(exc)) from None


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fa-issuer", description="The identity issuer (docs/issuer.md).",
                                epilog="exit codes: 0 success, 2 a configuration or usage error (one line on stderr)")
    sub = p.add_subparsers(dest="command", required=True, help="what to do")
    kg = sub.add_parser("keygen", help="create the issuer's RSA key file (PEM, mode 0600)")
    kg.add_argument("--key", required=True, help="the file to create (never overwritten)")
    kg.set_defaults(run=cmd_keygen)
    sv = sub.add_parser("serve", help="run the HTTP service")
    sv.add_argument("--key", help="the issuer key file (FA_ISSUER_KEY_FILE)")
    sv.add_argument("--db", help="the SQLite file of quota records (FA_ISSUER_DB_PATH)")
    sv.add_argument("--app", action="append", metavar="NAME=PUBLIC_KEY",
                    help="an app backend's Ed25519 public key, base64 (repeat for several apps; FA_ISSUER_APP_KEYS)")
    sv.add_argument("--host", help="the address to listen on (FA_ISSUER_HOST; default 127.0.0.1)")
    sv.add_argument("--port", type=int, help="the port to listen on (FA_ISSUER_PORT; default 8100)")
    sv.add_argument("--tokens-per-day", type=int, help="tokens per install per rolling 24 h (default 1)")
    sv.add_argument("--rate-per-min", type=float, help="token requests per minute per address (0: no limit)")
    sv.add_argument("--burst", type=int, help="token requests one address may make at once")
    sv.set_defaults(run=cmd_serve)
    ak = sub.add_parser("app-key", help="print a new app backend key pair (Ed25519)")
    ak.add_argument("--out", help="write the private key to this file (mode 0600) instead of printing it")
    ak.set_defaults(run=cmd_app_key)
    pk = sub.add_parser("public-key", help="print the public half of a key file, base64, on one line")
    which = pk.add_mutually_exclusive_group(required=True)
    which.add_argument("--key", help="the issuer key file: its SubjectPublicKeyInfo, what apps pin and FA_ISSUER_KEYS lists")
    which.add_argument("--app-key", help="an app backend's key file: its Ed25519 public key, for `serve --app NAME=…`")
    pk.set_defaults(run=cmd_public_key)
    cr = sub.add_parser("credential", help="mint one enrolment credential, as an app backend does")
    cr.add_argument("--app-key", required=True, help="the app backend's private key file (`app-key --out`)")
    cr.add_argument("--app", required=True, help="the app's name, as the issuer is configured with it (--app NAME=…)")
    cr.add_argument("--install", required=True, help="the install the credential admits (its quota's unit)")
    cr.add_argument("--valid-days", type=float, default=DEFAULT_VALID_DAYS,
                    help=f"days until the credential expires (default {DEFAULT_VALID_DAYS:g})")
    cr.set_defaults(run=cmd_credential)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        args.run(args)
    except (CliError, KeyFileError, QuotaStoreError) as exc:
        print(f"fa-issuer: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return 0


if __name__ == "__main__":
    sys.exit(main())
