/** The secagg wire messages (secagg/messages.py): a 24-byte header (magic "SA", version, type, 16-byte session id,
 * u32 party) and a length-checked body; counts are bounded by the bytes present and trailing bytes are an error. */

import { concat, u32be } from "../bytes.js";
import { MEMBER_LEAF_BYTES } from "./crypto.js";
import { MessageFormatError } from "./errors.js";
import { SHARE_BYTES } from "./shamir.js";

export const VERSION = 3;
export const HEADER_SIZE = 24;
const KEY = 32;
const SIG = 64;
export const MAX_PROOF_BYTES = 1 << 26;
/** The most signed members beyond its neighbourhood a party may ask for (ShareKeys). */
export const MAX_MEMBERS_WANTED = 1 << 20;
/** The fixed part of one PeerKeys entry: u32 party, identity key, c_pk, s_pk, the key signature's u32 length (then the
 * signature, 0 or 64 bytes, then the identity token as a blob: u32 length and 0 or TOKEN_BYTES bytes). */
export const PEER_ENTRY_BYTES = 4 + 3 * KEY + 4;
/** One member entry of RoutedShares: u32 party, identity key, c_pk, s_pk, signature. */
export const MEMBER_ENTRY_BYTES = 4 + 3 * KEY + SIG;
/** An identity token in PeerKeys entries and RoutedShares' optional token section (identityToken.ts TOKEN_BYTES). */
export const TOKEN_BYTES = 354;

export enum MsgType {
  AdvertiseKeys = 1,
  ShareKeys = 2,
  MaskedInput = 3,
  ConsistencySignature = 4,
  UnmaskShares = 5,
  MaskedInputProved = 6,
  PeerKeys = 11,
  RoutedShares = 12,
  ConsistencyRequest = 13,
  UnmaskRequest = 14,
}

export enum ShareKind {
  SelfMaskSeed = 1,
  MaskKey = 2,
}

/** A neighbour as the server fixed it when phase 0 closed: its identity key (32 zero bytes in sessions without
 * identities), its advertised keys and its identity key's signature over them (`keysPayload`; empty only in sessions
 * without identities), and its issuer token (empty when the cohort has none). Each party signs its keys again, bound
 * to session, task and members root, with its ShareKeys. */
export interface PeerEntry {
  party: number;
  identity: Uint8Array;
  cPk: Uint8Array;
  sPk: Uint8Array;
  /** Absent: empty (as Python's default). */
  signature?: Uint8Array;
  /** Absent: empty (as Python's default). */
  token?: Uint8Array;
}

/** A cohort member outside the recipient's neighbourhood, as it signed its keys for this session and task: lets a
 * device count verified members beyond the neighbours it exchanges shares with (SecAgg+). */
export interface MemberEntry {
  party: number;
  identity: Uint8Array;
  cPk: Uint8Array;
  sPk: Uint8Array;
  signature: Uint8Array;
}

export interface Head {
  sessionId: Uint8Array;
  party: number;
}

export type Message = Head &
  (
    /** `signature`: the party's identity-key signature over its keys (`keysPayload`, session-free; empty only in
     * sessions without identities). */
    | { type: MsgType.AdvertiseKeys; cPk: Uint8Array; sPk: Uint8Array; signature?: Uint8Array }
    /** `leaves`: the members list, one MEMBER_LEAF_BYTES leaf per party 1..n (crypto.ts `memberLeaf`, zeros for a party
     * that did not advertise), from which every member computes the members root — the seed of the neighbour graph
     * and part of every later binding. */
    | { type: MsgType.PeerKeys; peers: PeerEntry[]; leaves: Uint8Array }
    /** `signature`: the party's identity-key signature over its advertised keys bound to session and task (empty only
     * in sessions without identities); `membersWanted`: signed members beyond its neighbourhood it asks to see. */
    | { type: MsgType.ShareKeys; ciphertexts: [number, Uint8Array][]; signature: Uint8Array; membersWanted: number }
    /** `members`: the signed member entries the recipient asked for; `memberTokens`: present only in sessions that
     * carry identity tokens (docs/identities.md), each member entry's token in the same order (the senders' tokens came
     * with the peer keys); an empty list is no section. No sender's signature: a share that opens under the channel key
     * bound to the session, task and members root is its sender's word (docs/secagg.md, "Devices that check the
     * server"). */
    | { type: MsgType.RoutedShares; ciphertexts: [number, Uint8Array][]; members: MemberEntry[]; memberTokens?: Uint8Array[] | null }
    | { type: MsgType.MaskedInput; bits: number; dim: number; packed: Uint8Array }
    | { type: MsgType.MaskedInputProved; bits: number; dim: number; packed: Uint8Array; proof: Uint8Array }
    | { type: MsgType.ConsistencyRequest; survivors: Uint8Array }
    | { type: MsgType.ConsistencySignature; signature: Uint8Array }
    | { type: MsgType.UnmaskRequest; survivors: Uint8Array; signatures: [number, Uint8Array][] }
    | { type: MsgType.UnmaskShares; shares: [number, ShareKind, Uint8Array][] }
  );

const blob = (b: Uint8Array): Uint8Array => concat(u32be(b.length), b);
const pairs = (cts: [number, Uint8Array][]): Uint8Array => concat(u32be(cts.length), ...cts.flatMap(([v, ct]) => [u32be(v), blob(ct)]));

function fixed(b: Uint8Array, n: number, what: string): Uint8Array {
  if (b.length !== n) throw new MessageFormatError(`${what}: expected ${n} bytes, got ${b.length}`);
  return b;
}

function sig(s: Uint8Array | undefined): Uint8Array {
  const out = s ?? new Uint8Array(0);
  if (out.length !== 0 && out.length !== SIG) throw new MessageFormatError("signature: must be empty or 64 bytes");
  return out;
}

function token(t: Uint8Array | undefined): Uint8Array {
  const out = t ?? new Uint8Array(0);
  if (out.length !== 0 && out.length !== TOKEN_BYTES) throw new MessageFormatError(`token: must be empty or ${TOKEN_BYTES} bytes`);
  return out;
}

function leavesOf(leaves: Uint8Array): Uint8Array {
  if (leaves.length % MEMBER_LEAF_BYTES) throw new MessageFormatError(`leaves: a multiple of ${MEMBER_LEAF_BYTES} bytes, got ${leaves.length}`);
  return concat(u32be(leaves.length / MEMBER_LEAF_BYTES), leaves);
}

export function encode(m: Message): Uint8Array {
  const head = new Uint8Array(HEADER_SIZE);
  head.set([0x53, 0x41, VERSION, m.type]);
  if (m.sessionId.length !== 16) throw new MessageFormatError("session id: expected 16 bytes");
  head.set(m.sessionId, 4);
  new DataView(head.buffer).setUint32(20, m.party, false);
  let body: Uint8Array;
  switch (m.type) {
    case MsgType.AdvertiseKeys:
      body = concat(fixed(m.cPk, KEY, "c_pk"), fixed(m.sPk, KEY, "s_pk"), blob(sig(m.signature)));
      break;
    case MsgType.PeerKeys:
      body = concat(
        u32be(m.peers.length),
        ...m.peers.flatMap((p) => [u32be(p.party), fixed(p.identity, KEY, "identity"), fixed(p.cPk, KEY, "c_pk"), fixed(p.sPk, KEY, "s_pk"), blob(sig(p.signature)), blob(token(p.token))]),
        leavesOf(m.leaves),
      );
      break;
    case MsgType.ShareKeys:
      if (m.membersWanted > MAX_MEMBERS_WANTED) throw new MessageFormatError(`members_wanted: ${m.membersWanted} exceeds ${MAX_MEMBERS_WANTED}`);
      body = concat(blob(m.signature), u32be(m.membersWanted), pairs(m.ciphertexts));
      break;
    case MsgType.RoutedShares:
      body = concat(
        pairs(m.ciphertexts),
        u32be(m.members.length),
        ...m.members.flatMap((e) => [u32be(e.party), fixed(e.identity, KEY, "identity"), fixed(e.cPk, KEY, "c_pk"), fixed(e.sPk, KEY, "s_pk"), fixed(e.signature, SIG, "signature")]),
        m.memberTokens?.length ? tokenSection(m.memberTokens, m.members.length) : new Uint8Array(0),
      );
      break;
    case MsgType.MaskedInput:
      body = concat(Uint8Array.of(m.bits), u32be(m.dim), m.packed);
      break;
    case MsgType.MaskedInputProved:
      body = concat(Uint8Array.of(m.bits), u32be(m.dim), m.packed, blob(m.proof));
      break;
    case MsgType.ConsistencyRequest:
      body = blob(m.survivors);
      break;
    case MsgType.ConsistencySignature:
      body = m.signature;
      break;
    case MsgType.UnmaskRequest:
      body = concat(blob(m.survivors), u32be(m.signatures.length), ...m.signatures.flatMap(([p, s]) => [u32be(p), s]));
      break;
    case MsgType.UnmaskShares:
      body = concat(u32be(m.shares.length), ...m.shares.flatMap(([v, k, s]) => [u32be(v), Uint8Array.of(k), s]));
      break;
  }
  return concat(head, body);
}

/** `u32 n ‖ n × (u32 len ‖ token)`, one token per member entry. */
function tokenSection(tokens: Uint8Array[], members: number): Uint8Array {
  if (tokens.length !== members) throw new MessageFormatError(`member tokens: ${tokens.length} for ${members} member entries`);
  return concat(u32be(tokens.length), ...tokens.map((x) => blob(fixed(x, TOKEN_BYTES, "member token"))));
}

class Reader {
  private view: DataView;
  constructor(private readonly data: Uint8Array, public pos: number) {
    this.view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  }
  take(n: number, what: string): Uint8Array {
    if (n < 0 || this.pos + n > this.data.length) throw new MessageFormatError(`${what}: truncated message`);
    const out = this.data.slice(this.pos, this.pos + n);
    this.pos += n;
    return out;
  }
  u8(what: string): number {
    return this.take(1, what)[0];
  }
  u32(what: string): number {
    if (this.pos + 4 > this.data.length) throw new MessageFormatError(`${what}: truncated message`);
    const v = this.view.getUint32(this.pos, false);
    this.pos += 4;
    return v;
  }
  count(entry: number, what: string): number {
    const n = this.u32(what);
    if (n * entry > this.data.length - this.pos) throw new MessageFormatError(`${what}: count ${n} exceeds the message length`);
    return n;
  }
  blob(what: string): Uint8Array {
    return this.take(this.count(1, what), what);
  }
  rest(): number {
    return this.data.length - this.pos;
  }
  finish(): void {
    if (this.pos !== this.data.length) throw new MessageFormatError(`${this.data.length - this.pos} trailing bytes`);
  }
}

function signature(r: Reader): Uint8Array {
  const s = r.blob("signature");
  if (s.length !== 0 && s.length !== SIG) throw new MessageFormatError("signature: must be empty or 64 bytes");
  return s;
}

function parseTokens(r: Reader, expected: number, what: string): Uint8Array[] {
  const n = r.count(4 + TOKEN_BYTES, what);
  if (n !== expected) throw new MessageFormatError(`${what}: ${n} tokens for ${expected} entries`);
  const out: Uint8Array[] = [];
  for (let i = 0; i < n; i++) out.push(r.blob(what));
  if (out.some((t) => t.length !== TOKEN_BYTES)) throw new MessageFormatError(`${what}: a token must be ${TOKEN_BYTES} bytes`);
  return out;
}

function parsePairs(r: Reader, who: string): [number, Uint8Array][] {
  const n = r.count(8, "ciphertexts");
  const cts: [number, Uint8Array][] = [];
  for (let i = 0; i < n; i++) cts.push([r.u32(who), r.blob("ciphertext")]);
  return cts;
}

/** Parse any protocol message; MessageFormatError on anything malformed. */
export function decode(data: Uint8Array): Message {
  if (!(data instanceof Uint8Array)) throw new MessageFormatError("message: expected bytes");
  if (data.length < HEADER_SIZE) throw new MessageFormatError("message: shorter than the header");
  if (data[0] !== 0x53 || data[1] !== 0x41) throw new MessageFormatError("message: bad magic");
  if (data[2] !== VERSION) throw new MessageFormatError(`message: unsupported version ${data[2]}`);
  const type = data[3];
  const sessionId = data.slice(4, 20);
  const party = new DataView(data.buffer, data.byteOffset, data.byteLength).getUint32(20, false);
  const r = new Reader(data, HEADER_SIZE);
  const h = { sessionId, party };
  let m: Message;
  switch (type) {
    case MsgType.AdvertiseKeys:
      m = { ...h, type, cPk: r.take(KEY, "c_pk"), sPk: r.take(KEY, "s_pk"), signature: signature(r) };
      break;
    case MsgType.PeerKeys: {
      const n = r.count(PEER_ENTRY_BYTES + 4, "peers");
      const peers: PeerEntry[] = [];
      for (let i = 0; i < n; i++) {
        const head = r.take(PEER_ENTRY_BYTES, "peer");
        const view = new DataView(head.buffer, head.byteOffset, head.byteLength);
        const size = view.getUint32(4 + 3 * KEY, false);
        if (size !== 0 && size !== SIG) throw new MessageFormatError("signature: must be empty or 64 bytes");
        const entry = { party: view.getUint32(0, false), identity: head.slice(4, 4 + KEY), cPk: head.slice(4 + KEY, 4 + 2 * KEY), sPk: head.slice(4 + 2 * KEY, 4 + 3 * KEY) };
        const signature = r.take(size, "signature");
        const tok = r.blob("token");
        if (tok.length !== 0 && tok.length !== TOKEN_BYTES) throw new MessageFormatError(`token: must be empty or ${TOKEN_BYTES} bytes`);
        peers.push({ ...entry, signature, token: tok });
      }
      const count = r.count(MEMBER_LEAF_BYTES, "leaves");
      m = { ...h, type, peers, leaves: r.take(count * MEMBER_LEAF_BYTES, "leaves") };
      break;
    }
    case MsgType.ShareKeys: {
      const sig = signature(r);
      const wanted = r.u32("members_wanted");
      if (wanted > MAX_MEMBERS_WANTED) throw new MessageFormatError(`members_wanted: ${wanted} exceeds ${MAX_MEMBERS_WANTED}`);
      m = { ...h, type, ciphertexts: parsePairs(r, "receiver"), signature: sig, membersWanted: wanted };
      break;
    }
    case MsgType.RoutedShares: {
      const cts = parsePairs(r, "sender");
      const nm = r.count(MEMBER_ENTRY_BYTES, "members");
      const members: MemberEntry[] = [];
      for (let i = 0; i < nm; i++) {
        members.push({ party: r.u32("member"), identity: r.take(KEY, "identity"), cPk: r.take(KEY, "c_pk"), sPk: r.take(KEY, "s_pk"), signature: r.take(SIG, "signature") });
      }
      // the optional token section: present only when the session carries identity tokens (and member entries)
      const memberTokens = r.rest() ? parseTokens(r, members.length, "member_tokens") : null;
      m = { ...h, type, ciphertexts: cts, members, ...(memberTokens ? { memberTokens } : {}) };
      break;
    }
    case MsgType.MaskedInput: {
      const bits = r.u8("bits");
      const dim = r.u32("dim");
      m = { ...h, type, bits, dim, packed: r.take(r.rest(), "vector") };
      break;
    }
    case MsgType.MaskedInputProved: {
      const bits = r.u8("bits");
      const dim = r.u32("dim");
      if (bits < 1 || bits > 64) throw new MessageFormatError(`bits: ${bits} is not a bit width`);
      const packed = r.take(Math.ceil((dim * bits) / 8), "vector");
      const proof = r.blob("proof");
      if (proof.length > MAX_PROOF_BYTES) throw new MessageFormatError(`proof: ${proof.length} bytes, more than ${MAX_PROOF_BYTES}`);
      m = { ...h, type, bits, dim, packed, proof };
      break;
    }
    case MsgType.ConsistencyRequest:
      m = { ...h, type, survivors: r.blob("survivors") };
      break;
    case MsgType.ConsistencySignature:
      m = { ...h, type, signature: r.take(SIG, "signature") };
      break;
    case MsgType.UnmaskRequest: {
      const survivors = r.blob("survivors");
      const n = r.count(4 + SIG, "signatures");
      const sigs: [number, Uint8Array][] = [];
      for (let i = 0; i < n; i++) sigs.push([r.u32("signer"), r.take(SIG, "signature")]);
      m = { ...h, type, survivors, signatures: sigs };
      break;
    }
    case MsgType.UnmaskShares: {
      const n = r.count(5 + SHARE_BYTES, "shares");
      const shares: [number, ShareKind, Uint8Array][] = [];
      for (let i = 0; i < n; i++) {
        const v = r.u32("shares");
        const k = r.u8("shares");
        if (k !== ShareKind.SelfMaskSeed && k !== ShareKind.MaskKey) throw new MessageFormatError(`shares: unknown share kind ${k}`);
        shares.push([v, k, r.take(SHARE_BYTES, "shares")]);
      }
      m = { ...h, type, shares };
      break;
    }
    default:
      throw new MessageFormatError(`message: unknown type ${type}`);
  }
  r.finish();
  return m;
}

export function encodeBitmap(members: Iterable<number>, n: number): Uint8Array {
  const out = new Uint8Array(Math.ceil(n / 8));
  for (const p of members) {
    if (!(p >= 1 && p <= n)) throw new MessageFormatError(`survivors: party id ${p} is outside 1..${n}`);
    out[(p - 1) >> 3] |= 1 << ((p - 1) & 7);
  }
  return concat(u32be(n), out);
}

export function decodeBitmap(data: Uint8Array, n: number): Set<number> {
  if (data.length !== 4 + Math.ceil(n / 8) || new DataView(data.buffer, data.byteOffset).getUint32(0, false) !== n) {
    throw new MessageFormatError("survivors: bitmap does not match the cohort size");
  }
  const bits = data.subarray(4);
  const out = new Set<number>();
  for (let i = 0; i < n; i++) if ((bits[i >> 3] >> (i & 7)) & 1) out.add(i + 1);
  if (n % 8 && bits[bits.length - 1] >> n % 8) throw new MessageFormatError("survivors: bitmap names parties beyond n");
  return out;
}
