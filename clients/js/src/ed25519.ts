/**
 * The Ed25519-program instructions gpu_market reads (the IDL cannot describe them: they belong
 * to the Ed25519 precompile, and the program reads them through the Instructions sysvar).
 *
 * Layout, byte for byte as the Python SDK (`gpu_market.settle`) and the program's tests build it:
 *
 *     [n, 0, n x (sig_off:u16, 0xFFFF, pk_off:u16, 0xFFFF, msg_off:u16, msg_len:u16, 0xFFFF)]
 *     + payload
 *
 * Every offset points into this same instruction (instruction index 0xFFFF). Three payloads:
 * - `ed25519SettleInstruction`: before each `settle`: n pubkeys, n signatures, ONE copy of the
 *   40-byte attestation message; entry 0 is the worker's signature over its first 32 bytes (the
 *   receipt digest), entries 1.. the other committee members' over all 40 (the quorum settle).
 * - `ed25519MultiInstruction`: n signatures over one shared message (`attest_hardware`).
 * - `ed25519EntriesInstruction`: each entry with its own message, a repeated key stored once
 *   (`slash_equivocation`, `slash_validator_equivocation`, `slash_wrong_answer`).
 *
 * No official helper builds the multi-entry forms: web3.js's `Ed25519Program` and kit carry one
 * signature per instruction.
 */
import {
  address,
  getAddressEncoder,
  type Address,
  type Instruction,
  type InstructionWithData,
  type ReadonlyUint8Array,
} from "@solana/kit";

export const ED25519_PROGRAM_ADDRESS = address("Ed25519SigVerify111111111111111111111111111");
/** Offsets' instruction index meaning "this same instruction". */
export const THIS_INSTRUCTION = 0xffff;
/** The most signatures the program accepts in one Ed25519 instruction. */
export const MAX_ED25519_SIGNATURES = 16;
export const RECEIPT_DOMAIN = new TextEncoder().encode("gpu-market/receipt/v1");
export const RECEIPT_MESSAGE_LEN = RECEIPT_DOMAIN.length + 3 * 32 + 3 * 8 + 32;
export const RECEIPT_DIGEST_LEN = 32;
export const ATTESTATION_MESSAGE_LEN = RECEIPT_DIGEST_LEN + 8;

const HEADER = 2;
const OFFSETS = 14;
const U64_MAX = (1n << 64n) - 1n;
const I64_MIN = -(1n << 63n);
const I64_MAX = (1n << 63n) - 1n;

export type Ed25519Instruction = Instruction<typeof ED25519_PROGRAM_ADDRESS> &
  InstructionWithData<Uint8Array>;

/** A public key: an address or its 32 bytes. */
export type PublicKeyInput = Address | ReadonlyUint8Array;

export type Ed25519Signature = { publicKey: PublicKeyInput; signature: ReadonlyUint8Array };
export type Ed25519Entry = Ed25519Signature & { message: ReadonlyUint8Array };

function keyBytes(name: string, key: PublicKeyInput): Uint8Array {
  const bytes = typeof key === "string" ? getAddressEncoder().encode(key) : key;
  if (bytes.length !== 32) throw new RangeError(`${name} must be 32 bytes, got ${bytes.length}`);
  return Uint8Array.from(bytes);
}

function signatureBytes(name: string, signature: ReadonlyUint8Array): Uint8Array {
  if (signature.length !== 64) {
    throw new RangeError(`${name} must be 64 bytes, got ${signature.length}`);
  }
  return Uint8Array.from(signature);
}

function checkCount(n: number): void {
  if (!(n >= 1 && n <= MAX_ED25519_SIGNATURES)) {
    throw new RangeError(
      `an Ed25519 instruction here carries 1..${MAX_ED25519_SIGNATURES} signatures, got ${n}`,
    );
  }
}

function instruction(data: Uint8Array): Ed25519Instruction {
  return Object.freeze({ programAddress: ED25519_PROGRAM_ADDRESS, data });
}

function writeOffsets(
  view: DataView,
  i: number,
  sigOff: number,
  pkOff: number,
  msgOff: number,
  msgLen: number,
): void {
  const at = HEADER + OFFSETS * i;
  const words = [sigOff, THIS_INSTRUCTION, pkOff, THIS_INSTRUCTION, msgOff, msgLen, THIS_INSTRUCTION];
  words.forEach((w, k) => view.setUint16(at + 2 * k, w, true));
}

/** `(publicKey, signature, signedLength)` entries over prefixes of one copy of `message`. */
function sharedMessageInstruction(
  entries: ReadonlyArray<{ publicKey: Uint8Array; signature: Uint8Array; signedLength: number }>,
  message: ReadonlyUint8Array,
): Ed25519Instruction {
  const n = entries.length;
  checkCount(n);
  const headerLength = HEADER + OFFSETS * n;
  const msgOff = headerLength + 96 * n;
  if (msgOff + message.length > 0xffff) {
    throw new RangeError(`message of ${message.length} bytes is too long`);
  }
  const data = new Uint8Array(msgOff + message.length);
  const view = new DataView(data.buffer);
  data[0] = n;
  entries.forEach((e, i) => {
    const pkOff = headerLength + 32 * i;
    const sigOff = headerLength + 32 * n + 64 * i;
    writeOffsets(view, i, sigOff, pkOff, msgOff, e.signedLength);
    data.set(e.publicKey, pkOff);
    data.set(e.signature, sigOff);
  });
  data.set(message, msgOff);
  return instruction(data);
}

/** Verifies every `(publicKey, signature)` over one shared `message` (`attest_hardware`). */
export function ed25519MultiInstruction(
  signatures: ReadonlyArray<Ed25519Signature>,
  message: ReadonlyUint8Array,
): Ed25519Instruction {
  return sharedMessageInstruction(
    signatures.map((s, i) => ({
      publicKey: keyBytes(`publicKey ${i}`, s.publicKey),
      signature: signatureBytes(`signature ${i}`, s.signature),
      signedLength: message.length,
    })),
    message,
  );
}

/**
 * The Ed25519 instruction that precedes `settle`: the worker key's receipt signature (over the
 * receipt digest, the first 32 bytes of `attestationMessage`), then one entry per committee
 * attestation (over all 40 bytes). Their Validator PDAs are `settle`'s remaining accounts, in the
 * same order (`settleRemainingAccounts`).
 */
export function ed25519SettleInstruction(input: {
  workerKey: PublicKeyInput;
  receiptSignature: ReadonlyUint8Array;
  attestations?: ReadonlyArray<{ authority: PublicKeyInput; signature: ReadonlyUint8Array }>;
  attestationMessage: ReadonlyUint8Array;
}): Ed25519Instruction {
  const message = input.attestationMessage;
  if (message.length !== ATTESTATION_MESSAGE_LEN) {
    throw new RangeError(
      `attestationMessage must be ${ATTESTATION_MESSAGE_LEN} bytes, got ${message.length}`,
    );
  }
  return sharedMessageInstruction(
    [
      {
        publicKey: keyBytes("workerKey", input.workerKey),
        signature: signatureBytes("receiptSignature", input.receiptSignature),
        signedLength: RECEIPT_DIGEST_LEN,
      },
      ...(input.attestations ?? []).map((a, i) => ({
        publicKey: keyBytes(`attestation ${i} authority`, a.authority),
        signature: signatureBytes(`attestation ${i} signature`, a.signature),
        signedLength: message.length,
      })),
    ],
    message,
  );
}

/** Each entry with its own message; a public key repeated by later entries is stored once. */
export function ed25519EntriesInstruction(entries: ReadonlyArray<Ed25519Entry>): Ed25519Instruction {
  const n = entries.length;
  checkCount(n);
  const base = HEADER + OFFSETS * n;
  const body: number[] = [];
  const stored = new Map<string, number>();
  const offsets: Array<[number, number, number, number]> = [];
  entries.forEach((e, i) => {
    const pk = keyBytes(`entry ${i} publicKey`, e.publicKey);
    const sig = signatureBytes(`entry ${i} signature`, e.signature);
    const hex = pk.join(",");
    if (!stored.has(hex)) {
      stored.set(hex, base + body.length);
      body.push(...pk);
    }
    const sigOff = base + body.length;
    body.push(...sig, ...e.message);
    if (base + body.length > 0xffff) throw new RangeError("Ed25519 instruction too long for u16 offsets");
    offsets.push([sigOff, stored.get(hex)!, sigOff + 64, e.message.length]);
  });
  const data = new Uint8Array(base + body.length);
  const view = new DataView(data.buffer);
  data[0] = n;
  offsets.forEach(([sigOff, pkOff, msgOff, msgLen], i) => writeOffsets(view, i, sigOff, pkOff, msgOff, msgLen));
  data.set(body, base);
  return instruction(data);
}

/**
 * `[{publicKey, signature, message}]` of an Ed25519 instruction whose offsets all point into
 * itself, in entry order; throws otherwise (the checks the program makes).
 */
export function parseEd25519Signatures(data: ReadonlyUint8Array): Array<{
  publicKey: Uint8Array;
  signature: Uint8Array;
  message: Uint8Array;
}> {
  const n = data[0] ?? 0;
  if (data.length < HEADER || !(n >= 1 && n <= MAX_ED25519_SIGNATURES)) {
    throw new RangeError("not an Ed25519 instruction with 1..16 signatures");
  }
  if (data.length < HEADER + OFFSETS * n) throw new RangeError("Ed25519 instruction shorter than its offsets");
  const view = new DataView(Uint8Array.from(data).buffer);
  const take = (off: number, size: number) => {
    if (off + size > data.length) throw new RangeError("Ed25519 offset out of bounds");
    return Uint8Array.from(data.subarray(off, off + size));
  };
  return Array.from({ length: n }, (_, i) => {
    const w = (k: number) => view.getUint16(HEADER + OFFSETS * i + 2 * k, true);
    if (w(1) !== THIS_INSTRUCTION || w(3) !== THIS_INSTRUCTION || w(6) !== THIS_INSTRUCTION) {
      throw new RangeError("Ed25519 offsets point at another instruction");
    }
    return { publicKey: take(w(2), 32), signature: take(w(0), 64), message: take(w(4), w(5)) };
  });
}

function u64(name: string, value: number | bigint): Uint8Array {
  const v = BigInt(value);
  if (v < 0n || v > U64_MAX) throw new RangeError(`${name}=${v} is out of range [0, ${U64_MAX}]`);
  const out = new Uint8Array(8);
  new DataView(out.buffer).setBigUint64(0, v, true);
  return out;
}

function i64(name: string, value: number | bigint): Uint8Array {
  const v = BigInt(value);
  if (v < I64_MIN || v > I64_MAX) throw new RangeError(`${name}=${v} is out of i64 range`);
  const out = new Uint8Array(8);
  new DataView(out.buffer).setBigInt64(0, v, true);
  return out;
}

function bytes32(name: string, value: PublicKeyInput): Uint8Array {
  return keyBytes(name, value);
}

/**
 * The receipt message the worker's signature covers (docs/wire-formats.md; 173 bytes):
 * `"gpu-market/receipt/v1" || program || market || job || seq:u64 || cumulative_seconds:u64 ||
 * window_end:i64 || proof_hash(32)`.
 */
export function receiptMessage(input: {
  programAddress: Address;
  market: Address;
  job: Address;
  seq: number | bigint;
  cumulativeSeconds: number | bigint;
  windowEnd: number | bigint;
  proofHash: ReadonlyUint8Array;
}): Uint8Array {
  const parts = [
    RECEIPT_DOMAIN,
    bytes32("programAddress", input.programAddress),
    bytes32("market", input.market),
    bytes32("job", input.job),
    u64("seq", input.seq),
    u64("cumulativeSeconds", input.cumulativeSeconds),
    i64("windowEnd", input.windowEnd),
    bytes32("proofHash", input.proofHash),
  ];
  const out = new Uint8Array(RECEIPT_MESSAGE_LEN);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** sha256 of a 173-byte receipt message: the 32 bytes the worker key signs. */
export async function receiptDigest(message: ReadonlyUint8Array): Promise<Uint8Array> {
  if (message.length !== RECEIPT_MESSAGE_LEN) {
    throw new RangeError(
      `receipt message must be ${RECEIPT_MESSAGE_LEN} bytes, got ${message.length} bytes`,
    );
  }
  return new Uint8Array(await crypto.subtle.digest("SHA-256", Uint8Array.from(message)));
}

/** The 40 bytes a committee member signs: `receiptDigest(message) || approved_seconds:u64`. */
export async function attestationMessage(
  message: ReadonlyUint8Array,
  approvedSeconds: number | bigint,
): Promise<Uint8Array> {
  const out = new Uint8Array(ATTESTATION_MESSAGE_LEN);
  out.set(await receiptDigest(message), 0);
  out.set(u64("approvedSeconds", approvedSeconds), RECEIPT_DIGEST_LEN);
  return out;
}
