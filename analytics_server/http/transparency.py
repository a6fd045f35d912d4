"""The transparency log's public routes (docs/transparency.md): read-only, no credentials; witnesses post
cosignatures, accepted only under the keys in FA_LOG_WITNESS_KEYS."""

from __future__ import annotations

from aiohttp import web

from analytics_server.db.translog_store import LogRangeError, parse_witness_keys
from analytics_server.http.common import app_state, json_model, parse_json_body, parse_model, read_body
from fa_common.http_errors import HttpError
from fa_common.keyfile import KeyFileError, read_seed
from translog.heads import HeadError
from translog.wire import (
    MAX_ENTRIES_PAGE,
    CosignatureModel,
    CosignRequest,
    HeadModel,
    LogEntriesResponse,
    LogEntryModel,
    LogHeadResponse,
    LogHeadsResponse,
    LogKeyResponse,
    ProofResponse,
    b64,
)

routes = web.RouteTableDef()
COSIGN_BODY_LIMIT = 4096
MAX_SIZE = (1 << 53) - 1


def _int(request: web.Request, name: str, default: int | None = None) -> int:
    text = request.query.get(name)
    if text is None:
        if default is None:
            raise HttpError(400, f"{name}: required (an integer ≥ 0)")
        return default
    if not (text.isascii() and text.isdigit()) or len(text) > 16 or int(text) > MAX_SIZE:
        raise HttpError(400, f"{name}: must be an integer in 0..2^53, got {text[:20]!r}")
    return int(text)


def _range(request: web.Request) -> tuple[int, int]:
    start = _int(request, "start", 0)
    end = _int(request, "end", start + MAX_ENTRIES_PAGE)
    if end < start:
        raise HttpError(400, f"end: must be ≥ start ({end} < {start})")
    return start, min(end, start + MAX_ENTRIES_PAGE)


@routes.get("/v1/log/key")
async def log_key(request: web.Request) -> web.Response:
    st = app_state(request)
    signer = st.store.log.signer
    previous = [k.strip() for k in st.settings.log_previous_keys.split(",") if k.strip()]
    witnesses = {kid: b64(k) for kid, k in parse_witness_keys(st.settings.log_witness_keys).items()}
    return json_model(LogKeyResponse(origin=st.store.log.origin, public_key=b64(signer.public_key),
                                     key_id=signer.key_id, previous_keys=previous, witnesses=witnesses))


@routes.get("/v1/log/head")
async def log_head(request: web.Request) -> web.Response:
    st = app_state(request)
    head, cos = await st.store.log.head()
    if head is None:
        raise HttpError(404, "the log is empty: no head signed yet")
    resp = LogHeadResponse(head=HeadModel.of(head), cosignatures=[CosignatureModel.of(c) for c in cos])
    witnessed = await st.store.log.witnessed()
    if witnessed is not None and witnessed[0].head.size != head.head.size:
        resp.witnessed = HeadModel.of(witnessed[0])
        resp.witnessed_cosignatures = [CosignatureModel.of(c) for c in witnessed[1]]
    return json_model(resp, exclude_none=True)


@routes.get("/v1/log/heads")
async def log_heads(request: web.Request) -> web.Response:
    start, end = _range(request)
    heads = await app_state(request).store.log.heads(start, end)
    return json_model(LogHeadsResponse(heads=[HeadModel.of(h) for h in heads]))


@routes.get("/v1/log/entries")
async def log_entries(request: web.Request) -> web.Response:
    start, end = _range(request)
    size, rows = await app_state(request).store.log.entries(start, end)
    return json_model(LogEntriesResponse(size=size, entries=[LogEntryModel(index=i, entry=e) for i, e in rows]))


@routes.get("/v1/log/proof/inclusion")
async def inclusion(request: web.Request) -> web.Response:
    index, size = _int(request, "index"), _int(request, "size")
    if index >= size:
        raise HttpError(400, f"index: must be below size ({index} ≥ {size})")
    try:
        proof = await app_state(request).store.log.inclusion(index, size)
    except LogRangeError as exc:
        raise HttpError(404, str(exc)) from None
    return json_model(ProofResponse(proof=[b64(h) for h in proof]))


@routes.get("/v1/log/proof/consistency")
async def consistency(request: web.Request) -> web.Response:
    first, second = _int(request, "first"), _int(request, "second")
    if first > second:
        raise HttpError(400, f"first: must be ≤ second ({first} > {second})")
    try:
        proof = await app_state(request).store.log.consistency(first, second)
    except LogRangeError as exc:
        raise HttpError(404, str(exc)) from None
    return json_model(ProofResponse(proof=[b64(h) for h in proof]))


@routes.post("/v1/log/cosignatures")
async def cosign(request: web.Request) -> web.Response:
    st = app_state(request)
    body = await read_body(request, COSIGN_BODY_LIMIT)
    req = parse_model(CosignRequest, parse_json_body(request, body))
    witnesses = parse_witness_keys(st.settings.log_witness_keys)
    if req.key_id not in witnesses:
        raise HttpError(403, f"key_id: {req.key_id!r} is not a witness this log accepts (FA_LOG_WITNESS_KEYS)")
    try:
        cosig = req.parse()
        stored = await st.store.log.cosign(req.size, cosig, witnesses)
    except LogRangeError as exc:
        raise HttpError(404, str(exc)) from None
    except HeadError as exc:
        raise HttpError(422, f"signature: {exc}") from None
    return web.json_response({"stored": stored, "size": req.size})


def load_log_seed(path: str | None) -> bytes | None:
    """The log key's seed from FA_LOG_KEY_FILE (None: unset); ValueError naming the file."""
    if not path:
        return None
    try:
        return read_seed(path)
    except KeyFileError as exc:
        raise ValueError(f"log_key_file: {exc}") from None
