/**
 * A job's life on the rent page, as `gpum run`, `gpum job watch`, `gpum job top-up` and
 * `gpum job stop` do it, with the wallet signing every step:
 *
 * - `createJob`: the checks that need no signature first (wallet, chain, SOL for fees, the
 *   deposit in tokens, the workload, the committee, the provider's worker answering the node's
 *   fresh health probe), then one transaction (`create_job` with the workload hash and the
 *   committee's Validator accounts); nothing moves before the wallet signs it.
 * - `deliver`: the spec posted to the worker through the node, signed once (`deliver`), retried
 *   on 404/503/no answer for `DELIVER_S`; a refusal leaves the job Open and says to stop it
 *   (cancel = full refund).
 * - `Watch`: polls the node's `/v1/dashboard/jobs/<job>` (state, runway, windows, paid); the
 *   endpoint ("host:port" per published port, as `gpum run` prints it) comes from the worker's
 *   status, signed once (`status`) and read until the container runs.
 * - `stop`: cancel an Open job; finish a Running one; wait until no settlement is possible
 *   (the grace over, by the chain's clock); close it; the receipt (deposited = paid + refunded).
 */
import { type Address, address, createNoopSigner } from "@solana/kit";
import {
  JobStatus,
  type Job,
  type Market,
  type MarketParams,
  committeeAccounts,
  fetchMaybeJob,
  fetchMaybeMarket,
  fetchMaybeProvider,
  findEscrowPda,
  findJobPda,
  getCancelJobInstructionAsync,
  getCloseJobInstructionAsync,
  getCreateJobInstructionAsync,
  getFinishJobInstruction,
  getJobSize,
  getTopUpInstructionAsync,
  withRemainingAccounts,
} from "../src";
import { canonicalBytes, sealSecrets, specHash, type WorkloadSpec } from "../src/workload";
import { costOf, date, duration, tokens } from "./format";
import { type Config, NodeError, api, ata, chainNow, errorText, rpc, send, tokenBalance, worker, workerHeaders } from "./node";
import { setField, show, status } from "./ui";
import { type Connected, isRejection } from "./wallet";

const DELIVER_S = 60;
const STATUS_SIGNATURE_S = 240; // the worker takes a request signed within 300 s
const STOP_MARGIN_S = 120;
const FEE_RESERVE_LAMPORTS = 20_000n;
const TOKEN_ACCOUNT_BYTES = 165n;
const STATES = ["open", "running", "finishing", "completed", "cancelled", "failed", "declined"];

/** A failure that the page shows as is: what happened and what to do. */
export class Refusal extends Error {}

/** A rejection in the wallet as the sentence the page shows. */
export function rejected(what: string, after = "nothing was sent"): Refusal {
  return new Refusal(`You rejected ${what} in your wallet; ${after}.`);
}

export function stateName(s: JobStatus): string {
  return STATES[s] ?? String(s);
}

/** The parameters in force at `now` (`Market::params_at`). */
export function paramsAt(m: Market, now: number): MarketParams {
  return m.paramsEffectiveAt !== 0n && BigInt(now) >= m.paramsEffectiveAt ? m.pendingParams : m.params;
}

export type Offer = {
  provider: string;
  owner: string;
  gpu_model: string;
  gpus_free: number;
  gpus_total: number;
  region: string;
  price_per_gpu_second: number;
  price_per_gpu_hour: number;
  score: number;
  endpoint: string;
  online: boolean | null;
  rank: number;
};

export type RentInput = {
  gpus: number;
  microHours: bigint;
  spec: WorkloadSpec;
  secrets: Record<string, string>;
  committee: string[]; // empty: the node's default choice
  maxPricePerHour: bigint | null;
};

export type Rented = { job: Address; provider: Address; spec: WorkloadSpec; workloadHash: Uint8Array };

/** The deposit for `gpus` x `microHours` at `price` per GPU-second: at least one window. */
export function depositFor(price: bigint, gpus: number, microHours: bigint, windowSeconds: number | bigint): bigint {
  const rate = price * BigInt(gpus);
  const want = costOf(rate, microHours);
  const min = rate * BigInt(windowSeconds);
  return want > min ? want : min;
}

async function market(config: Config): Promise<Market> {
  const m = await fetchMaybeMarket(rpc, address(config.market));
  if (!m.exists) throw new Refusal(`market ${config.market} does not exist on this node's chain`);
  return m.data;
}

/** Checks, then the create_job transaction; the job's address and spec. */
export async function createJob(wallet: Connected, config: Config, offer: Offer, input: RentInput): Promise<Rented> {
  const user = address(wallet.address);
  const provider = address(offer.provider);
  status("checking the offer, your balances and the provider…");
  const [m, p, now] = await Promise.all([market(config), fetchMaybeProvider(rpc, provider), chainNow()]);
  if (!p.exists || p.data.market !== address(config.market)) throw new Refusal(`provider ${offer.provider} is not in this market any more; choose another`);
  const params = paramsAt(m, now);
  const price = p.data.pricePerGpuSecond;
  if (input.maxPricePerHour !== null && price * 3600n > input.maxPricePerHour) {
    throw new Refusal(`provider ${offer.provider} charges ${tokens(price * 3600n, config.decimals)} per GPU-hour, above your max price ${tokens(input.maxPricePerHour, config.decimals)}; nothing was sent`);
  }
  // Without a max price the job never pays more than the price the user was shown.
  const shown = BigInt(offer.price_per_gpu_second);
  if (input.maxPricePerHour === null && price > shown) {
    throw new Refusal(`provider ${offer.provider} raised its price from ${tokens(shown * 3600n, config.decimals)} to ${tokens(price * 3600n, config.decimals)} per GPU-hour since the offers were loaded; nothing was sent: review the offer and rent again`);
  }
  if (input.gpus > offer.gpus_free) throw new Refusal(`provider ${offer.provider} has ${offer.gpus_free} free GPU(s); ask for fewer`);
  const deposit = depositFor(price, input.gpus, input.microHours, params.windowSeconds);
  const account = await ata(user, m.paymentMint);
  const [{ value: lamports }, held, jobRent, tokenRent] = await Promise.all([
    rpc.getBalance(user).send(),
    tokenBalance(account),
    rpc.getMinimumBalanceForRentExemption(BigInt(getJobSize())).send(),
    rpc.getMinimumBalanceForRentExemption(TOKEN_ACCOUNT_BYTES).send(),
  ]);
  const needSol = jobRent + tokenRent + FEE_RESERVE_LAMPORTS;
  if (lamports < needSol) {
    throw new Refusal(`your wallet holds ${tokens(lamports, 9)} SOL; creating the job needs about ${tokens(needSol, 9)} SOL for fees and the job's rent (returned when it is closed): add SOL, nothing was sent`);
  }
  if (held < deposit) {
    throw new Refusal(`your token account ${account} holds ${tokens(held, config.decimals)}; the deposit needs ${tokens(deposit, config.decimals)}: fund it or ask for fewer hours; nothing was sent`);
  }
  let committee = input.committee;
  let quorum: number;
  if (committee.length === 0) {
    const c = await api<{ committee: string[]; quorum: number }>(`/v1/rent/committee?provider=${offer.provider}`).catch((e) => {
      throw new Refusal(`no committee: ${e instanceof Error ? e.message : String(e)}`);
    });
    committee = c.committee;
    quorum = c.quorum;
  } else {
    if (committee.length > 5) throw new Refusal("committee: at most 5 validators");
    const top = Math.min(3, committee.length);
    quorum = Math.min(top, Math.max(params.minQuorum, Math.floor(committee.length / 2) + 1));
    if (params.minQuorum > top) throw new Refusal(`committee: the market's min_quorum is ${params.minQuorum}; name at least ${params.minQuorum} validators`);
  }
  const spec: WorkloadSpec = { ...input.spec };
  if (Object.keys(input.secrets).length) spec.secretEnv = await sealSecrets(p.data.workerKey, input.secrets);
  const workloadHash = await specHash(spec); // validates the spec
  status(`asking provider ${offer.provider}'s worker whether it is up…`);
  const health = await api<{ online: boolean; error: string }>(`/v1/rent/workers/${offer.provider}/health`);
  if (!health.online) {
    throw new Refusal(`provider ${offer.provider} is offline (${health.error || "its worker does not answer"}); nothing was sent: choose another provider`);
  }
  const jobId = BigInt(Date.now());
  const [job] = await findJobPda({ market: address(config.market), user, jobId });
  const create = withRemainingAccounts(
    await getCreateJobInstructionAsync({
      user: createNoopSigner(user), market: address(config.market), provider, paymentMint: m.paymentMint,
      userPaymentAccount: account, jobId, gpuCount: input.gpus, deposit,
      maxPricePerGpuSecond: input.maxPricePerHour === null ? shown : input.maxPricePerHour / 3600n,
      committee: committee.map((k) => address(k)), quorum, workloadHash, expectedParams: params,
    }),
    await committeeAccounts(address(config.market), committee.map((k) => address(k))),
  );
  status(`sign the job in your wallet: ${input.gpus} GPU(s), deposit ${tokens(deposit, config.decimals)}…`);
  try {
    await send(wallet, [create]);
  } catch (e) {
    if (isRejection(e)) throw rejected("the job's transaction");
    throw e;
  }
  remember(wallet.address, { job, provider, spec });
  return { job, provider, spec, workloadHash };
}

/** Posts the spec to the worker (one signature), retrying while it has not seen the job yet. */
export async function deliver(wallet: Connected, r: Rented): Promise<void> {
  status(`job ${r.job} created; sign the workload delivery in your wallet…`);
  let headers: Record<string, string>;
  try {
    headers = await workerHeaders(wallet, "deliver", r.job, r.workloadHash);
  } catch (e) {
    if (isRejection(e)) throw rejected("the workload delivery", `the job exists and holds your deposit: press Stop to cancel it with a full refund`);
    throw e;
  }
  const until = Date.now() + DELIVER_S * 1000;
  for (let attempt = 0; ; attempt++) {
    status(`delivering the workload to provider ${r.provider} (attempt ${attempt + 1})…`);
    const a = await worker(r.provider, r.job, "workload", headers, { method: "POST", body: canonicalBytes(r.spec) });
    if (a.status === 200) return;
    const retry = a.status === 0 || a.status === 404 || a.status === 503 || a.status === 502 || a.status === 504;
    if (!retry || Date.now() > until) {
      throw new Refusal(`the provider's worker did not take the workload (HTTP ${a.status}: ${errorText(a.text)}); the job is still Open: press Stop to cancel it with a full refund`);
    }
    await sleep(Math.min(5000, 500 * 2 ** attempt, (a.retryAfter ?? 30) * 1000));
  }
}

type DashJob = {
  on_chain: boolean;
  closed: Record<string, unknown> | null;
  chain: { status: string; deposited: number; cost: number; last_seq: number; created_at: number } | null;
  runway: { runway_seconds: number | null } | null;
  node: { last_seq: number } | null;
};

/** Polls the job and shows it; reads the endpoint from the worker once the job runs. */
export class Watch {
  private timer: number | undefined;
  private statusHeaders: { headers: Record<string, string>; at: number } | null = null;
  private asked = false;
  endpoints: string[] = [];
  state = "";

  constructor(
    readonly wallet: Connected,
    readonly config: Config,
    readonly job: Address,
    readonly provider: Address,
    readonly workloadHash: Uint8Array,
  ) {}

  start(): void {
    show("job", true);
    setField("job", this.job, this.job);
    const a = document.querySelector<HTMLAnchorElement>('[data-field="job"]');
    if (a) a.href = `/dashboard/job/${this.job}`;
    void this.tick();
  }

  stop(): void {
    window.clearTimeout(this.timer);
  }

  /** The job was closed (its close confirmed): no more polling. */
  closed(): void {
    this.stop();
    this.state = "closed";
    setField("state", "closed", "closed");
    for (const a of ["top-up", "stop", "logs"]) {
      const b = document.querySelector<HTMLButtonElement>(`button[data-action="${a}"]`);
      if (b) {
        b.disabled = true;
        b.dataset.wasDisabled = "1"; // stays off when the running action ends (ui.busy)
      }
    }
  }

  private async tick(): Promise<void> {
    try {
      await this.refresh();
    } catch {
      /* the next tick retries; the figures stay as last read */
    }
    if (this.state !== "closed") {
      window.clearTimeout(this.timer);
      this.timer = window.setTimeout(() => void this.tick(), 3000);
    }
  }

  async refresh(): Promise<void> {
    const d = await api<DashJob>(`/v1/dashboard/jobs/${this.job}`).catch((e) => {
      if (e instanceof NodeError && e.status === 404) return null;
      throw e;
    });
    const dec = this.config.decimals;
    if (this.state === "closed") return; // closed here meanwhile: the last read is stale
    if (!d || (!d.on_chain && d.closed)) {
      this.state = "closed";
      setField("state", "closed", "closed");
      return;
    }
    const c = d.chain;
    if (!c) return;
    this.state = c.status;
    setField("state", c.status, c.status);
    const runway = d.runway?.runway_seconds ?? null;
    setField("runway", runway === null ? (c.status === "open" ? "starts when accepted" : "—") : duration(runway), runway);
    const windows = Math.max(c.last_seq, d.node?.last_seq ?? 0);
    setField("windows", String(windows), windows);
    setField("paid", tokens(BigInt(c.cost), dec), c.cost);
    setField("deposited", tokens(BigInt(c.deposited), dec), c.deposited);
    setField("created", date(c.created_at), c.created_at);
    if (c.status === "running" && this.endpoints.length === 0) await this.readEndpoint();
  }

  /** The worker's status with one `status` signature, reused while fresh. */
  private async readEndpoint(): Promise<void> {
    const now = Date.now() / 1000;
    if (!this.statusHeaders || now - this.statusHeaders.at > STATUS_SIGNATURE_S) {
      if (this.asked && this.statusHeaders === null) return; // refused once: the Logs button asks again
      this.asked = true;
      try {
        status("sign the status request in your wallet to see the container's endpoint…");
        this.statusHeaders = { headers: await workerHeaders(this.wallet, "status", this.job, this.workloadHash), at: now };
      } catch (e) {
        status(isRejection(e) ? "You rejected the status request; the endpoint is not shown (the job runs on)." : `cannot sign the status request: ${String(e)}`);
        return;
      }
    }
    const a = await worker(this.provider, this.job, "workload", this.statusHeaders.headers);
    if (a.status !== 200) {
      status(`the worker's status: HTTP ${a.status}: ${errorText(a.text)}`);
      return;
    }
    const s = JSON.parse(a.text) as { state?: string; ports?: { host?: string; host_port?: number }[] };
    const ends = (s.ports ?? []).map((pt) => `${pt.host}:${pt.host_port}`);
    status(`container ${s.state ?? "state unknown"}`);
    if (s.state === "running" || s.state === "exited") {
      this.endpoints = ends;
      setField("endpoint", ends.length ? ends.join(", ") : "no published port", JSON.stringify(ends));
    }
  }
}

/** One `logs` signature, then the last lines of the container's output. */
export async function logs(wallet: Connected, job: Address, provider: Address, workloadHash: Uint8Array): Promise<string> {
  let headers: Record<string, string>;
  try {
    headers = await workerHeaders(wallet, "logs", job, workloadHash);
  } catch (e) {
    if (isRejection(e)) throw rejected("the logs request");
    throw e;
  }
  const a = await worker(provider, job, "logs", headers, { query: "?tail=200" });
  if (a.status !== 200) throw new Refusal(`the worker did not serve the logs (HTTP ${a.status}: ${errorText(a.text)})`);
  return a.text;
}

async function loadJob(job: Address): Promise<Job | null> {
  const j = await fetchMaybeJob(rpc, job);
  return j.exists ? j.data : null;
}

/** Tops the escrow up by `microHours` at the job's rate. */
export async function topUp(wallet: Connected, config: Config, job: Address, microHours: bigint): Promise<bigint> {
  const j = await loadJob(job);
  if (!j) throw new Refusal(`job ${job} is closed`);
  if (j.status !== JobStatus.Open && j.status !== JobStatus.Running) throw new Refusal(`job ${job} is ${stateName(j.status)}: only an Open or Running job takes a top-up`);
  const amount = costOf(j.terms.ratePerSecond, microHours);
  const m = await market(config);
  const account = await ata(address(wallet.address), m.paymentMint);
  const held = await tokenBalance(account);
  if (held < amount) throw new Refusal(`your token account holds ${tokens(held, config.decimals)}; the top-up needs ${tokens(amount, config.decimals)}; nothing was sent`);
  const ix = await getTopUpInstructionAsync({
    user: createNoopSigner(address(wallet.address)), market: address(config.market), job,
    paymentMint: m.paymentMint, userPaymentAccount: account, amount,
  });
  status(`sign the top-up of ${tokens(amount, config.decimals)} in your wallet…`);
  try {
    await send(wallet, [ix]);
  } catch (e) {
    if (isRejection(e)) throw rejected("the top-up");
    throw e;
  }
  return amount;
}

export type Receipt = { deposited: bigint; paid: bigint; refunded: bigint };

/** `gpum job stop`: cancel (Open) or finish (Running), wait out the grace, close: the receipt. */
export async function stop(wallet: Connected, config: Config, job: Address): Promise<Receipt> {
  const user = address(wallet.address);
  let j = await loadJob(job);
  if (!j) throw new Refusal(`job ${job} is already closed`);
  if (j.user !== user) throw new Refusal(`job ${job} belongs to ${j.user}; connect that wallet to stop it`);
  const m = await market(config);
  const account = await ata(user, m.paymentMint);
  const common = { market: address(config.market), provider: j.provider, job, paymentMint: m.paymentMint, userPaymentAccount: account };
  if (j.status === JobStatus.Open) {
    status("sign the cancel in your wallet (the whole deposit comes back)…");
    const ix = await getCancelJobInstructionAsync({ signer: createNoopSigner(user), ...common });
    await sendOr(wallet, ix, "the cancel");
  } else if (j.status === JobStatus.Running) {
    status("sign the finish in your wallet (billing stops)…");
    await sendOr(wallet, getFinishJobInstruction({ signer: createNoopSigner(user), provider: j.provider, job }), "the finish");
  }
  const begin = Date.now();
  for (;;) {
    j = await loadJob(job);
    if (!j) throw new Refusal(`job ${job} was closed meanwhile`);
    const now = await chainNow();
    const terminal = j.status >= JobStatus.Completed;
    const graceEnd = j.status === JobStatus.Finishing ? Number(j.endedAt + j.terms.graceSeconds) : null;
    if (terminal || (graceEnd !== null && now > graceEnd)) break;
    if (graceEnd === null) throw new Refusal(`job ${job} is ${stateName(j.status)}: it cannot be closed yet; press Stop again`);
    if ((Date.now() - begin) / 1000 > Number(j.terms.graceSeconds) + STOP_MARGIN_S) {
      throw new Refusal(`job ${job} is finished (billing stopped) but its settlement grace ends at ${date(graceEnd)}: press Stop again then to close it and get the refund`);
    }
    status(`billing stopped; waiting for the settlement grace to end at ${date(graceEnd)} (${duration(graceEnd - now + 1)} left; receipts up to the finish still settle)…`);
    await sleep(2000);
  }
  const [escrow] = await findEscrowPda({ job });
  const inEscrow = await tokenBalance(escrow);
  const receipt: Receipt = {
    deposited: j.deposited,
    paid: j.paidProvider + j.paidValidators + j.paidTreasury + j.burned,
    refunded: j.refunded + inEscrow,
  };
  status("sign the close in your wallet (the rest of the deposit and the job's rent come back)…");
  await sendOr(wallet, await getCloseJobInstructionAsync({ user: createNoopSigner(user), ...common }), "the close");
  return receipt;
}

async function sendOr(wallet: Connected, ix: Parameters<typeof send>[1][number], what: string): Promise<void> {
  try {
    await send(wallet, [ix]);
  } catch (e) {
    if (isRejection(e)) throw rejected(what, "the job is unchanged");
    throw e;
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

// ------------------------------------------------------------------ the wallet's jobs here

type Kept = { job: string; provider: string; spec: string };

/** Remembers a job's spec in this browser (to reopen it with ?job=). */
export function remember(wallet: string, r: { job: string; provider: string; spec: WorkloadSpec }): void {
  const key = `gpum-rent-jobs:${wallet}`;
  const list = JSON.parse(localStorage.getItem(key) ?? "[]") as Kept[];
  list.unshift({ job: r.job, provider: r.provider, spec: new TextDecoder().decode(canonicalBytes(r.spec)) });
  localStorage.setItem(key, JSON.stringify(list.slice(0, 20)));
}

/** A job of the wallet on chain (to reopen it): its provider and workload hash. */
export async function reopen(wallet: Connected, job: Address): Promise<{ provider: Address; workloadHash: Uint8Array; state: string }> {
  const j = await loadJob(job);
  if (!j) throw new Refusal(`job ${job} is not on chain (closed, or another chain)`);
  if (j.user !== address(wallet.address)) throw new Refusal(`job ${job} belongs to ${j.user}; connect that wallet to manage it`);
  return { provider: j.provider, workloadHash: Uint8Array.from(j.workloadHash), state: stateName(j.status) };
}
