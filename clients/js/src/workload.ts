/**
 * Workload spec: its canonical bytes and hash (the `workload_hash` a `create_job` fixes on
 * chain), secrets sealed to the provider's worker key, and the wallet-signed requests to the
 * worker's API. The format is docs/protocol.md, "Workloads"; the reference implementation is
 * the Python SDK's `gpu_market.workload`, which this matches byte for byte:
 *
 *     canonical = json.dumps(spec_json, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
 *     workload_hash = sha256(canonical)
 *
 * `spec_json` always has version, image, command, args, env, secret_env, ports and
 * finish_on_exit; shm_size_mib and scratch_mib only when set. Specs with a checkpoint or a
 * cluster section are built with the Python SDK (`gpu-market run --checkpoint`, `cluster`).
 *
 * Secrets are libsodium sealed boxes (`crypto_box_seal`) to the X25519 key converted from the
 * provider's ed25519 worker key: only that worker opens them; two sealings differ.
 */
import {
  getAddressEncoder,
  getBase58Decoder,
  getBase64Decoder,
  getBase64Encoder,
  signBytes,
  type Address,
  type ReadonlyUint8Array,
} from "@solana/kit";
import sodium from "libsodium-wrappers";

export const WORKLOAD_VERSION = 1;
/** `job.workload_hash` of a job without a workload. */
export const NO_WORKLOAD: ReadonlyUint8Array = new Uint8Array(32);
export const MAX_IMAGE_BYTES = 255;
/** `command` and `args` together. */
export const MAX_ARGV_ITEMS = 64;
/** `env` and `secretEnv` together. */
export const MAX_ENV_ENTRIES = 64;
export const MAX_PORTS = 16;
export const MAX_SHM_MIB = 1_048_576;
export const MAX_SCRATCH_MIB = 16_777_216;
export const MAX_SPEC_BYTES = 65_536;
/** One command/args item, one env value, one secret's plaintext (UTF-8 bytes). */
export const MAX_ITEM_BYTES = 4096;
/** Bytes a sealed box adds to its plaintext (ephemeral X25519 key 32 + MAC 16). */
export const SEALED_BOX_OVERHEAD = 48;
export const MAX_SECRET_B64_CHARS = 8192;

export type PortSpec = { port: number; protocol?: "tcp" | "udp" };

/** What the worker runs for a job. `secretEnv` values are `sealSecrets` output (base64). */
export type WorkloadSpec = {
  image: string;
  command?: readonly string[];
  args?: readonly string[];
  env?: Readonly<Record<string, string>>;
  secretEnv?: Readonly<Record<string, string>>;
  ports?: readonly PortSpec[];
  shmSizeMib?: number;
  scratchMib?: number;
  finishOnExit?: boolean;
  version?: number;
};

/** A spec, a secret or a request is not acceptable; the message names the field. */
export class WorkloadSpecError extends Error {
  override name = "WorkloadSpecError";
}

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;
// OCI distribution reference grammar (github.com/distribution/reference), minus IPv6 hosts.
const DOMAIN_COMPONENT = "(?:[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9])";
const DOMAIN = `${DOMAIN_COMPONENT}(?:\\.${DOMAIN_COMPONENT})*(?::[0-9]+)?`;
const PATH_COMPONENT = "[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*";
const IMAGE_REF = new RegExp(
  `^(?:${DOMAIN}/)?${PATH_COMPONENT}(?:/${PATH_COMPONENT})*` +
    "(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$",
);
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

function utf8Length(field: string, value: string): number {
  if (value.includes("\0")) throw new WorkloadSpecError(`${field} contains a NUL character, which is not allowed`);
  if (LONE_SURROGATE.test(value)) {
    throw new WorkloadSpecError(`${field} contains a lone surrogate, which is not allowed`);
  }
  return new TextEncoder().encode(value).length;
}

function checkStr(field: string, value: unknown, maxBytes: number): string {
  if (typeof value !== "string") throw new WorkloadSpecError(`${field} must be a string, got ${typeof value}`);
  const n = utf8Length(field, value);
  if (n > maxBytes) throw new WorkloadSpecError(`${field} is ${n} bytes; at most ${maxBytes} UTF-8 bytes allowed`);
  return value;
}

function checkInt(field: string, value: unknown, lo: number, hi: number): number {
  if (typeof value !== "number" || !Number.isInteger(value)) {
    throw new WorkloadSpecError(`${field} must be an integer ${lo}..${hi}, got ${typeof value}`);
  }
  if (value < lo || value > hi) throw new WorkloadSpecError(`${field}=${value} is out of range [${lo}, ${hi}]`);
  return value;
}

function checkSecretB64(field: string, value: unknown): void {
  const text = checkStr(field, value, MAX_SECRET_B64_CHARS);
  let raw: ReadonlyUint8Array | null = null;
  if (/^[A-Za-z0-9+/]*={0,2}$/.test(text) && text.length % 4 === 0) {
    raw = getBase64Encoder().encode(text);
  }
  if (raw === null || getBase64Decoder().decode(raw) !== text) {
    throw new WorkloadSpecError(`${field} must be the standard padded base64 of a sealed box (use sealSecrets)`);
  }
  const lo = SEALED_BOX_OVERHEAD;
  const hi = SEALED_BOX_OVERHEAD + MAX_ITEM_BYTES;
  if (raw.length < lo || raw.length > hi) {
    throw new WorkloadSpecError(`${field} decodes to ${raw.length} bytes; a sealed secret is ${lo}..${hi} bytes`);
  }
}

function byCodePoint(a: string, b: string): number {
  const x = Array.from(a, (c) => c.codePointAt(0)!);
  const y = Array.from(b, (c) => c.codePointAt(0)!);
  for (let i = 0; i < Math.min(x.length, y.length); i++) if (x[i] !== y[i]) return x[i]! - y[i]!;
  return x.length - y.length;
}

function checkNames(field: string, pairs: Readonly<Record<string, string>>): string[] {
  const names = Object.keys(pairs).sort(byCodePoint);
  for (const name of names) {
    if (!ENV_NAME.test(name)) {
      throw new WorkloadSpecError(
        `${field} name ${JSON.stringify(name)} is not allowed; names match [A-Za-z_][A-Za-z0-9_]{0,127}`,
      );
    }
  }
  return names;
}

function sortedPorts(ports: readonly PortSpec[]): Array<{ port: number; protocol: string }> {
  return ports
    .map((p) => ({ port: p.port, protocol: p.protocol ?? "tcp" }))
    .sort((a, b) => a.port - b.port || byCodePoint(a.protocol, b.protocol));
}

/** Throws a WorkloadSpecError naming the first field outside the limits (as the SDK's validate). */
export function validateSpec(spec: WorkloadSpec): void {
  specJsonChecked(spec);
}

function specJsonChecked(spec: WorkloadSpec): Record<string, unknown> {
  const version = spec.version ?? WORKLOAD_VERSION;
  if (version !== WORKLOAD_VERSION) {
    throw new WorkloadSpecError(`version ${version} is not supported; this SDK knows version ${WORKLOAD_VERSION}`);
  }
  checkStr("image", spec.image, MAX_IMAGE_BYTES);
  if (!spec.image) throw new WorkloadSpecError("image must not be empty");
  if (!/^[\x00-\x7f]*$/.test(spec.image) || !IMAGE_REF.test(spec.image)) {
    throw new WorkloadSpecError(
      `image ${JSON.stringify(spec.image)} is not a valid image reference; expected ` +
        "[registry[:port]/]name[:tag][@sha256:<64 hex>] with a lowercase name and no whitespace, " +
        "e.g. docker.io/library/python:3.12",
    );
  }
  const command = [...(spec.command ?? [])];
  const args = [...(spec.args ?? [])];
  command.forEach((item, i) => checkStr(`command[${i}]`, item, MAX_ITEM_BYTES));
  args.forEach((item, i) => checkStr(`args[${i}]`, item, MAX_ITEM_BYTES));
  if (command.length + args.length > MAX_ARGV_ITEMS) {
    throw new WorkloadSpecError(
      `command and args have ${command.length + args.length} items together; at most ${MAX_ARGV_ITEMS} allowed`,
    );
  }
  if (command.length > 0 && (command[0] === "" || command[0]!.startsWith("-"))) {
    throw new WorkloadSpecError(
      `command[0] ${JSON.stringify(command[0])} is not allowed; the entrypoint must be non-empty and must not start with '-'`,
    );
  }
  const env = spec.env ?? {};
  const secretEnv = spec.secretEnv ?? {};
  const envNames = checkNames("env", env);
  const secretNames = checkNames("secret_env", secretEnv);
  if (envNames.length + secretNames.length > MAX_ENV_ENTRIES) {
    throw new WorkloadSpecError(
      `env and secret_env have ${envNames.length + secretNames.length} entries together; at most ${MAX_ENV_ENTRIES} allowed`,
    );
  }
  for (const name of envNames) checkStr(`env[${JSON.stringify(name)}]`, env[name], MAX_ITEM_BYTES);
  for (const name of secretNames) checkSecretB64(`secret_env[${JSON.stringify(name)}]`, secretEnv[name]);
  const both = envNames.filter((n) => secretNames.includes(n));
  if (both.length > 0) {
    throw new WorkloadSpecError(`${JSON.stringify(both[0])} is in both env and secret_env; a name may be set only once`);
  }
  const ports = sortedPorts(spec.ports ?? []);
  if (ports.length > MAX_PORTS) throw new WorkloadSpecError(`ports has ${ports.length} entries; at most ${MAX_PORTS} allowed`);
  ports.forEach((p, i) => {
    checkInt(`ports[${i}].port`, p.port, 1, 65535);
    if (p.protocol !== "tcp" && p.protocol !== "udp") {
      throw new WorkloadSpecError(`ports[${i}].protocol ${JSON.stringify(p.protocol)} is not allowed; use "tcp" or "udp"`);
    }
    const prev = ports[i - 1];
    if (prev && prev.port === p.port && prev.protocol === p.protocol) {
      throw new WorkloadSpecError(`ports has ${p.port}/${p.protocol} twice; each port/protocol once`);
    }
  });
  if (spec.shmSizeMib !== undefined) checkInt("shm_size_mib", spec.shmSizeMib, 1, MAX_SHM_MIB);
  if (spec.scratchMib !== undefined) checkInt("scratch_mib", spec.scratchMib, 1, MAX_SCRATCH_MIB);
  const finishOnExit = spec.finishOnExit ?? false;
  if (typeof finishOnExit !== "boolean") {
    throw new WorkloadSpecError(`finish_on_exit must be true or false, got ${typeof finishOnExit}`);
  }
  const json: Record<string, unknown> = {
    version,
    image: spec.image,
    command,
    args,
    env: Object.fromEntries(envNames.map((n) => [n, env[n]])),
    secret_env: Object.fromEntries(secretNames.map((n) => [n, secretEnv[n]])),
    ports,
  };
  if (spec.shmSizeMib !== undefined) json.shm_size_mib = spec.shmSizeMib;
  if (spec.scratchMib !== undefined) json.scratch_mib = spec.scratchMib;
  json.finish_on_exit = finishOnExit;
  const n = canonicalJson(json).length;
  if (n > MAX_SPEC_BYTES) {
    throw new WorkloadSpecError(
      `the canonical spec is ${n} bytes; at most ${MAX_SPEC_BYTES} allowed (shorten env values, args or secrets)`,
    );
  }
  return json;
}

/** The JSON object form of a valid spec (the body the worker's deliver request carries). */
export function specToJson(spec: WorkloadSpec): Record<string, unknown> {
  return specJsonChecked(spec);
}

/**
 * Python's `json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)`:
 * keys sorted by code point, no spaces, every character outside printable ASCII escaped as
 * `\uXXXX` (lowercase, UTF-16 code units).
 */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value === "boolean") return JSON.stringify(value);
  if (typeof value === "number") {
    if (!Number.isSafeInteger(value)) throw new WorkloadSpecError(`only integers are allowed, got ${value}`);
    return String(value);
  }
  if (typeof value === "string") {
    return JSON.stringify(value).replace(
      /[\u007f-\uffff]/g,
      (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`,
    );
  }
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  if (typeof value === "object") {
    const entries = Object.entries(value as Record<string, unknown>).sort(([a], [b]) => byCodePoint(a, b));
    return `{${entries.map(([k, v]) => `${canonicalJson(k)}:${canonicalJson(v)}`).join(",")}}`;
  }
  throw new WorkloadSpecError(`cannot encode a ${typeof value}`);
}

/** The canonical encoding of a valid spec (ASCII, at most 64 KiB). */
export function canonicalBytes(spec: WorkloadSpec): Uint8Array {
  return new TextEncoder().encode(canonicalJson(specJsonChecked(spec)));
}

/** sha256 of `canonicalBytes(spec)`: the `workloadHash` argument of `create_job`. */
export async function specHash(spec: WorkloadSpec): Promise<Uint8Array> {
  return new Uint8Array(await crypto.subtle.digest("SHA-256", Uint8Array.from(canonicalBytes(spec))));
}

function key32(name: string, key: Address | ReadonlyUint8Array): Uint8Array {
  const bytes = typeof key === "string" ? getAddressEncoder().encode(key) : key;
  if (bytes.length !== 32) throw new RangeError(`${name} must be 32 bytes, got ${bytes.length}`);
  return Uint8Array.from(bytes);
}

/**
 * Sealed box (`crypto_box_seal`) of `plaintext` (at most 4096 bytes) to the provider's ed25519
 * `workerKey`: 48 bytes longer than the plaintext and different on every call.
 */
export async function sealSecret(
  workerKey: Address | ReadonlyUint8Array,
  plaintext: ReadonlyUint8Array,
): Promise<Uint8Array> {
  if (plaintext.length > MAX_ITEM_BYTES) {
    throw new WorkloadSpecError(`a secret is ${plaintext.length} bytes; at most ${MAX_ITEM_BYTES} bytes allowed`);
  }
  await sodium.ready;
  const curve = sodium.crypto_sign_ed25519_pk_to_curve25519(key32("workerKey", workerKey));
  return sodium.crypto_box_seal(Uint8Array.from(plaintext), curve);
}

/**
 * Worker side: opens a sealed box with the worker key's 32-byte ed25519 seed. Throws a
 * WorkloadSpecError if it was sealed to another key or is damaged.
 */
export async function openSecret(workerSeed: ReadonlyUint8Array, sealed: ReadonlyUint8Array): Promise<Uint8Array> {
  if (workerSeed.length !== 32) throw new RangeError(`workerSeed must be 32 bytes, got ${workerSeed.length}`);
  if (sealed.length < SEALED_BOX_OVERHEAD) {
    throw new WorkloadSpecError(`a sealed secret is at least ${SEALED_BOX_OVERHEAD} bytes, got ${sealed.length}`);
  }
  await sodium.ready;
  const { publicKey, privateKey } = sodium.crypto_sign_seed_keypair(Uint8Array.from(workerSeed));
  try {
    return sodium.crypto_box_seal_open(
      Uint8Array.from(sealed),
      sodium.crypto_sign_ed25519_pk_to_curve25519(publicKey),
      sodium.crypto_sign_ed25519_sk_to_curve25519(privateKey),
    );
  } catch {
    throw new WorkloadSpecError(
      "cannot open the sealed secret: it was sealed to a different worker key or is damaged " +
        "(seal it again to this provider's worker key)",
    );
  }
}

/** `secretEnv` for `secrets` (name -> plaintext): base64 of each UTF-8 value sealed to `workerKey`. */
export async function sealSecrets(
  workerKey: Address | ReadonlyUint8Array,
  secrets: Readonly<Record<string, string>>,
): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  for (const name of checkNames("secret_env", secrets)) {
    const value = checkStr(`secret_env[${JSON.stringify(name)}]`, secrets[name], MAX_ITEM_BYTES);
    out[name] = getBase64Decoder().decode(await sealSecret(workerKey, new TextEncoder().encode(value)));
  }
  return out;
}

export const REQUEST_DOMAIN = new TextEncoder().encode("gpum-workload-request-v1\0");
/** The worker accepts a request whose timestamp is within this many seconds of its clock. */
export const REQUEST_MAX_SKEW_S = 300;
export const ACTIONS = ["deliver", "status", "logs", "exec", "files", "mesh"] as const;
export type RequestAction = (typeof ACTIONS)[number];

/**
 * What the job's user signs to call the worker API: `REQUEST_DOMAIN || u8 len(action) || action
 * || job(32) || workload_hash(32) || timestamp:i64`.
 */
export function requestMessage(
  action: RequestAction,
  job: Address | ReadonlyUint8Array,
  workloadHash: ReadonlyUint8Array,
  timestamp: number | bigint,
): Uint8Array {
  if (!ACTIONS.includes(action)) throw new RangeError(`action ${JSON.stringify(action)} is not one of ${ACTIONS.join(", ")}`);
  const a = new TextEncoder().encode(action);
  const out = new Uint8Array(REQUEST_DOMAIN.length + 1 + a.length + 64 + 8);
  let at = 0;
  for (const part of [REQUEST_DOMAIN, Uint8Array.of(a.length), a, key32("job", job), key32("workloadHash", workloadHash)]) {
    out.set(part, at);
    at += part.length;
  }
  new DataView(out.buffer).setBigInt64(at, BigInt(timestamp), true);
  return out;
}

/** HTTP headers that authorize `action` on `job` as the user wallet (`keyPair`, `address`). */
export async function signRequest(
  keyPair: CryptoKeyPair,
  signer: Address,
  action: RequestAction,
  job: Address,
  workloadHash: ReadonlyUint8Array,
  timestamp: number,
): Promise<Record<string, string>> {
  const signature = await signBytes(keyPair.privateKey, requestMessage(action, job, workloadHash, timestamp));
  return {
    "X-Gpum-Signer": signer,
    "X-Gpum-Timestamp": String(timestamp),
    "X-Gpum-Signature": getBase58Decoder().decode(signature),
  };
}
