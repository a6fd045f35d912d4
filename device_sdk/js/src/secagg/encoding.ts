/** Vectors in the ring Z/2^bits (secagg/encoding.py): two's complement reduction, mask words and the wire packing
 * (exactly `bits` bits per entry, little-endian bit order). Entries are kept as two 32-bit halves so that 62-bit
 * rings need no BigInt in the mask loop. */

import { ConfigError, MessageFormatError } from "./errors.js";

export class ModVector {
  readonly lo: Uint32Array;
  readonly hi: Uint32Array;
  constructor(readonly dim: number, readonly bits: number) {
    this.lo = new Uint32Array(dim);
    this.hi = new Uint32Array(dim);
  }

  /** Signed integers (|v| < 2^(bits−1)) → their representatives in [0, 2^bits). */
  static fromSigned(values: readonly bigint[], bits: number): ModVector {
    const half = 1n << BigInt(bits - 1);
    const v = new ModVector(values.length, bits);
    const modulus = 1n << BigInt(bits);
    values.forEach((x, i) => {
      if (x >= half || x < -half) throw new ConfigError(`values: entries must lie in [-2^${bits - 1}, 2^${bits - 1}) for bits=${bits}`);
      const r = ((x % modulus) + modulus) % modulus;
      v.lo[i] = Number(r & 0xffffffffn);
      v.hi[i] = Number(r >> 32n);
    });
    return v;
  }

  /** Ring elements already in [0, 2^bits). */
  static fromUnsigned(values: readonly bigint[], bits: number): ModVector {
    const v = new ModVector(values.length, bits);
    values.forEach((x, i) => {
      if (x < 0n || x >> BigInt(bits) !== 0n) throw new ConfigError(`input_vector: entries must lie in [0, 2^${bits})`);
      v.lo[i] = Number(x & 0xffffffffn);
      v.hi[i] = Number(x >> 32n);
    });
    return v;
  }

  /** Little-endian keystream words (4 bytes each for bits ≤ 32, else 8). */
  static fromKeystream(ks: Uint8Array, dim: number, bits: number): ModVector {
    const v = new ModVector(dim, bits);
    const view = new DataView(ks.buffer, ks.byteOffset, ks.byteLength);
    if (bits <= 32) for (let i = 0; i < dim; i++) v.lo[i] = view.getUint32(4 * i, true);
    else
      for (let i = 0; i < dim; i++) {
        v.lo[i] = view.getUint32(8 * i, true);
        v.hi[i] = view.getUint32(8 * i + 4, true);
      }
    return v;
  }

  /** this += sign·other (modulo 2^64 or 2^32; reduce with `mask`). */
  addInto(other: ModVector, sign: 1 | -1): void {
    const { lo, hi } = this;
    for (let i = 0; i < this.dim; i++) {
      if (sign > 0) {
        const l = lo[i] + other.lo[i];
        lo[i] = l >>> 0;
        hi[i] = (hi[i] + other.hi[i] + (l > 0xffffffff ? 1 : 0)) >>> 0;
      } else {
        const l = lo[i] - other.lo[i];
        lo[i] = l >>> 0;
        hi[i] = (hi[i] - other.hi[i] - (l < 0 ? 1 : 0)) >>> 0;
      }
    }
  }

  mask(): void {
    if (this.bits >= 64) return;
    if (this.bits <= 32) {
      this.hi.fill(0);
      if (this.bits < 32) {
        const m = 2 ** this.bits - 1;
        for (let i = 0; i < this.dim; i++) this.lo[i] = (this.lo[i] & m) >>> 0;
      }
      return;
    }
    const m = 2 ** (this.bits - 32) - 1;
    for (let i = 0; i < this.dim; i++) this.hi[i] = (this.hi[i] & m) >>> 0;
  }

  get(i: number): bigint {
    return (BigInt(this.hi[i]) << 32n) | BigInt(this.lo[i]);
  }

  copy(): ModVector {
    const v = new ModVector(this.dim, this.bits);
    v.lo.set(this.lo);
    v.hi.set(this.hi);
    return v;
  }
}

export const packedSize = (dim: number, bits: number): number => Math.ceil((dim * bits) / 8);

/** Exactly `bits` bits per entry, little-endian bit order (bit 0 of entry 0 is bit 0 of byte 0). */
export function pack(v: ModVector): Uint8Array {
  const { bits, dim } = v;
  const out = new Uint8Array(packedSize(dim, bits));
  let at = 0; // bit position
  const write = (value: number, n: number): void => {
    for (let done = 0; done < n; ) {
      const byte = at >> 3;
      const off = at & 7;
      const take = Math.min(8 - off, n - done);
      out[byte] |= ((value >>> done) & ((1 << take) - 1)) << off;
      done += take;
      at += take;
    }
  };
  for (let i = 0; i < dim; i++) {
    if (bits <= 32) write(v.lo[i], bits);
    else {
      write(v.lo[i], 32);
      write(v.hi[i], bits - 32);
    }
  }
  return out;
}

export function unpack(data: Uint8Array, dim: number, bits: number): ModVector {
  if (data.length !== packedSize(dim, bits)) throw new MessageFormatError(`vector: expected ${packedSize(dim, bits)} bytes, got ${data.length}`);
  const v = new ModVector(dim, bits);
  let at = 0;
  const read = (n: number): number => {
    let value = 0;
    for (let done = 0; done < n; ) {
      const off = at & 7;
      const take = Math.min(8 - off, n - done);
      value += ((data[at >> 3] >> off) & ((1 << take) - 1)) * 2 ** done;
      done += take;
      at += take;
    }
    return value;
  };
  for (let i = 0; i < dim; i++) {
    if (bits <= 32) v.lo[i] = read(bits);
    else {
      v.lo[i] = read(32);
      v.hi[i] = read(bits - 32);
    }
  }
  return v;
}
