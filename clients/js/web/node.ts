/**
 * Everything the rent page asks the node that serves it (the page's CSP allows nothing else):
 * the dashboard's JSON, the rent relay's config and committee, the chain through
 * `POST /v1/rent/rpc` (a kit RPC on that relative URL) and the provider's worker through
 * `/v1/rent/workers/<provider>/...`. Transactions are signed by the wallet and sent here;
 * worker requests carry the wallet's signature of `requestMessage` in the X-Gpum-* headers.
 */
import {
  type Address,
  type Instruction,
  SOLANA_ERROR__INSTRUCTION_ERROR__CUSTOM,
  SOLANA_ERROR__RPC__TRANSPORT_HTTP_ERROR,
  address,
  appendTransactionMessageInstructions,
  compileTransaction,
  createNoopSigner,
  createSolanaRpc,
  createTransactionMessage,
  getAddressEncoder,
  getBase58Decoder,
  getBase64Decoder,
  getProgramDerivedAddress,
  getTransactionEncoder,
  isSolanaError,
  pipe,
  setTransactionMessageFeePayerSigner,
  setTransactionMessageLifetimeUsingBlockhash,
  type Signature,
} from "@solana/kit";
import { getGpuMarketErrorMessage, type GpuMarketError } from "../src/generated";
import { requestMessage, type RequestAction } from "../src/workload";
import type { Connected } from "./wallet";

export const rpc = createSolanaRpc("/v1/rent/rpc");
export type Rpc = typeof rpc;

const TOKEN_PROGRAM = address("TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA");
const ATA_PROGRAM = address("ATokenGPvbdGVxr1b2hvZbsiqW5xWH25efTNsLJA8knL");
const CONFIRM_TIMEOUT_MS = 60_000;

/** A refusal by the node (its `{error, message}` body) or no answer at all (status 0). */
export class NodeError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** GET (or POST `body`) a JSON route of this node. */
export async function api<T>(path: string, init?: RequestInit): Promise<T> {
  let r: Response;
  try {
    r = await fetch(path, { cache: "no-store", headers: { Accept: "application/json" }, ...init });
  } catch (e) {
    throw new NodeError(0, "unreachable", `this node does not answer (${String(e)}); check your connection and reload`);
  }
  let body: unknown = null;
  try {
    body = await r.json();
  } catch {
    body = null;
  }
  if (r.ok) return body as T;
  const b = (body ?? {}) as { error?: string; message?: string };
  throw new NodeError(r.status, b.error ?? "http_error", b.message ?? `HTTP ${r.status} from ${path}`);
}

export type Config = {
  chain: string;
  market: string;
  program: string;
  mint: string;
  decimals: number;
  node_validator: string;
};

/** The user's associated token account of `mint`. */
export async function ata(owner: Address, mint: Address): Promise<Address> {
  const enc = getAddressEncoder();
  const [pda] = await getProgramDerivedAddress({
    programAddress: ATA_PROGRAM,
    seeds: [enc.encode(owner), enc.encode(TOKEN_PROGRAM), enc.encode(mint)],
  });
  return pda;
}

/** What a token account holds (0 while it does not exist). */
export async function tokenBalance(account: Address): Promise<bigint> {
  try {
    const { value } = await rpc.getTokenAccountBalance(account).send();
    return BigInt(value.amount);
  } catch (e) {
    if (e instanceof NodeError || (e instanceof Error && /fetch|network/i.test(e.message))) throw e;
    return 0n;
  }
}

/** The chain's clock (unix seconds), from the Clock sysvar. */
export async function chainNow(): Promise<number> {
  const clock = address("SysvarC1ock11111111111111111111111111111111");
  const { value } = await rpc.getAccountInfo(clock, { encoding: "base64" }).send();
  if (!value) throw new Error("the chain has no Clock sysvar");
  const raw = Uint8Array.from(atob(value.data[0]), (c) => c.charCodeAt(0));
  return Number(new DataView(raw.buffer).getBigInt64(32, true));
}

/** A failed transaction or preflight in words: the program's own error message when it named one. */
export function explain(e: unknown): string {
  for (let cur: unknown = e; cur; cur = (cur as { cause?: unknown }).cause) {
    if (isSolanaError(cur, SOLANA_ERROR__INSTRUCTION_ERROR__CUSTOM)) {
      const code = Number(cur.context.code);
      const text = getGpuMarketErrorMessage(code as GpuMarketError);
      return text ? `the program refused it: ${text} (error ${code})` : `an instruction failed with error ${code}`;
    }
  }
  if (isSolanaError(e, SOLANA_ERROR__RPC__TRANSPORT_HTTP_ERROR)) {
    const code = e.context.statusCode;
    if (code === 429) return "this node is answering too many of your requests right now (HTTP 429): wait a minute and retry";
    if (code === 504) return "this node's Solana RPC did not answer in time (HTTP 504): retry in a moment";
    return `this node could not reach its Solana RPC (HTTP ${code}): retry in a moment, or use another validator node`;
  }
  if (e instanceof NodeError) return e.message;
  return e instanceof Error ? e.message : String(e);
}

/**
 * Builds a transaction of `instructions` paid by the wallet, has the wallet sign it, sends
 * it through this node and waits until it is confirmed: its signature. The wallet's refusal
 * propagates unchanged (nothing was sent); a failure on chain throws with `explain`'s text.
 */
export async function send(wallet: Connected, instructions: readonly Instruction[]): Promise<Signature> {
  const payer = createNoopSigner(address(wallet.address));
  const { value: blockhash } = await rpc.getLatestBlockhash({ commitment: "confirmed" }).send();
  const message = pipe(
    createTransactionMessage({ version: 0 }),
    (m) => setTransactionMessageFeePayerSigner(payer, m),
    (m) => setTransactionMessageLifetimeUsingBlockhash(blockhash, m),
    (m) => appendTransactionMessageInstructions(instructions, m),
  );
  const wire = new Uint8Array(getTransactionEncoder().encode(compileTransaction(message)));
  const signed = await wallet.signTransaction(wire); // a refusal stops here
  const signature = getBase58Decoder().decode(signed.subarray(1, 65)) as Signature;
  const encoded = getBase64Decoder().decode(signed) as Parameters<Rpc["sendTransaction"]>[0];
  await rpc.sendTransaction(encoded, { encoding: "base64", preflightCommitment: "confirmed" }).send();
  const until = Date.now() + CONFIRM_TIMEOUT_MS;
  while (Date.now() < until) {
    const { value } = await rpc.getSignatureStatuses([signature]).send();
    const st = value[0];
    if (st && st.err) throw new Error(`transaction ${signature} failed: ${JSON.stringify(st.err, (_, v) => (typeof v === "bigint" ? Number(v) : v))}`);
    if (st && (st.confirmationStatus === "confirmed" || st.confirmationStatus === "finalized")) return signature;
    await new Promise((r) => setTimeout(r, 500));
  }
  throw new Error(`transaction ${signature} was not confirmed within ${CONFIRM_TIMEOUT_MS / 1000} s; check the job before retrying`);
}

/** The X-Gpum-* headers authorizing `action` on `job`, signed by the wallet (one request to sign). */
export async function workerHeaders(
  wallet: Connected,
  action: RequestAction,
  job: Address,
  workloadHash: Uint8Array,
): Promise<Record<string, string>> {
  const timestamp = Math.floor(Date.now() / 1000);
  const signature = await wallet.signMessage(requestMessage(action, job, workloadHash, timestamp));
  return {
    "X-Gpum-Signer": wallet.address,
    "X-Gpum-Timestamp": String(timestamp),
    "X-Gpum-Signature": getBase58Decoder().decode(signature),
  };
}

/** One call to the provider's worker through this node: the status and the body as text. */
export async function worker(
  provider: string,
  job: string,
  what: "workload" | "logs",
  headers: Record<string, string>,
  init: { method?: "GET" | "POST"; body?: Uint8Array; query?: string } = {},
): Promise<{ status: number; text: string; retryAfter: number | null }> {
  const url = `/v1/rent/workers/${provider}/jobs/${job}/${what}${init.query ?? ""}`;
  let r: Response;
  try {
    r = await fetch(url, {
      method: init.method ?? "GET",
      cache: "no-store",
      headers: init.body ? { ...headers, "Content-Type": "application/json" } : headers,
      body: init.body ? new Blob([init.body as BlobPart]) : undefined,
    });
  } catch (e) {
    return { status: 0, text: `this node does not answer (${String(e)})`, retryAfter: null };
  }
  const retry = r.headers.get("Retry-After");
  return { status: r.status, text: await r.text(), retryAfter: retry && /^\d+$/.test(retry) ? Number(retry) : null };
}

/** The `error`/`message` text of a JSON error body, else the body itself (shortened). */
export function errorText(text: string): string {
  try {
    const b = JSON.parse(text) as { error?: unknown; message?: unknown };
    if (typeof b.message === "string") return b.message;
    if (typeof b.error === "string") return b.error;
  } catch {
    /* not JSON */
  }
  return text.slice(0, 300);
}
