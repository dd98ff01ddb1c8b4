/**
 * The rent page (`/dashboard/rent`, bundled into dashboard_assets/rent.js): connect a Wallet
 * Standard wallet, browse the market's offers (the dashboard's ranking, filtered here as
 * `gpum offers` filters), rent one with a container, watch it, read its logs, top it up, stop
 * it and see the receipt. `?job=<address>` reopens one of the connected wallet's jobs.
 *
 * One action runs at a time (the buttons are disabled meanwhile); every failure lands in the
 * error banner as one sentence saying what happened and what to do; no money moves unless the
 * wallet signed a transaction, and the checks of `job.createJob` run before it asks.
 */
import { type Address, address } from "@solana/kit";
import type { Wallet } from "@wallet-standard/base";
import type { WorkloadSpec } from "../src/workload";
import { parseEnvLines, parseHours, parsePorts, parseTokens, shellSplit, tokens } from "./format";
import { type Offer, Refusal, Watch, createJob, deliver, depositFor, logs, reopen, stop, topUp } from "./job";
import { type Config, NodeError, api, ata, explain, rpc, tokenBalance } from "./node";
import { busy, el, error, setField, show, status } from "./ui";
import { Connected, isRejection, watchWallets } from "./wallet";

type OffersAnswer = { offers: Offer[]; decimals: { payment: number }; count: number };

let config: Config | null = null;
let wallet: Connected | null = null;
let offers: Offer[] = [];
let chosen: Offer | null = null;
let watch: Watch | null = null;
let windowSeconds = 0n;
let listWallets: () => Wallet[] = () => [];

const BASE58 = /^[1-9A-HJ-NP-Za-km-z]{32,44}$/;

function chains(): string[] {
  return config ? [config.chain] : ["solana:localnet"];
}

// ------------------------------------------------------------------ actions

/** Runs one user action: buttons off meanwhile, its failure in the banner. */
async function action(fn: () => Promise<void>): Promise<void> {
  error("");
  busy(true);
  try {
    await fn();
  } catch (e) {
    status("");
    if (e instanceof Refusal) error(e.message);
    else if (isRejection(e)) error("You rejected the request in your wallet; nothing was sent.");
    else error(`${explain(e)}. Nothing further was signed or sent; reload the page to see where things stand.`);
  } finally {
    busy(false);
  }
}

// ------------------------------------------------------------------ wallet

function renderWallets(list: Wallet[]): void {
  const box = el('[data-role="wallets"]');
  box.replaceChildren();
  for (const w of list) {
    const b = document.createElement("button");
    b.type = "button";
    b.dataset.wallet = w.name;
    b.append(document.createTextNode(w.name));
    b.addEventListener("click", () => void action(() => connect(w)));
    box.append(b);
  }
}

function openWallets(): void {
  const list = listWallets();
  renderWallets(list);
  show("wallets", true);
  if (list.length === 0) {
    error(`No wallet here can sign on ${chains().join(" or ")}: install a Wallet Standard wallet (it must offer signTransaction and signMessage) and reload.`);
  }
}

async function connect(w: Wallet): Promise<void> {
  if (!config) throw new Refusal("this node's configuration is not loaded yet; reload the page");
  const chain = w.chains.find((c) => c === config?.chain);
  if (!chain) throw new Refusal(`${w.name} does not sign on ${config.chain} (it offers ${w.chains.join(", ")}): switch its network, or use another wallet`);
  status(`connecting ${w.name}…`);
  try {
    wallet = await Connected.connect(w, chain);
  } catch (e) {
    if (isRejection(e)) throw new Refusal(`You rejected the connection in ${w.name}; nothing was shared or sent.`);
    throw e;
  }
  show("wallets", false);
  show("account", true);
  setField("wallet", wallet.address, wallet.address);
  el('[data-action="connect"]').textContent = "Change wallet";
  await balances();
  status("");
  const job = new URLSearchParams(location.search).get("job");
  if (job && BASE58.test(job) && !watch) await reopenJob(address(job));
}

async function balances(): Promise<void> {
  if (!wallet || !config) return;
  const owner = address(wallet.address);
  const [{ value: lamports }, held] = await Promise.all([
    rpc.getBalance(owner).send(),
    ata(owner, address(config.mint)).then(tokenBalance),
  ]);
  setField("wallet-sol", `${tokens(lamports, 9)} SOL`, lamports);
  setField("wallet-tokens", tokens(held, config.decimals), held);
}

// ------------------------------------------------------------------ offers

function filtersForm(): HTMLFormElement {
  return el<HTMLFormElement>('form[data-role="filters"]');
}

async function loadOffers(): Promise<void> {
  const all = (filtersForm().elements.namedItem("all") as HTMLInputElement).checked;
  const a = await api<OffersAnswer>(`/v1/dashboard/offers${all ? "?all=true" : ""}`);
  offers = a.offers;
  renderOffers();
  const now = new Date();
  setField("updated", now.toLocaleTimeString(), Math.floor(now.getTime() / 1000));
}

/** The offers the filters keep, best rank first (as `gpum offers` filters them). */
function filtered(): Offer[] {
  const f = filtersForm().elements;
  const value = (name: string): string => (f.namedItem(name) as HTMLInputElement).value.trim();
  const gpu = value("gpu").toLowerCase().replace(/_/g, " ");
  const region = value("region").toLowerCase();
  const minGpus = Number(value("min-gpus") || "0");
  let maxHour: bigint | null = null;
  if (value("max-price") && config) maxHour = parseTokens(value("max-price"), config.decimals, "max price");
  return offers.filter((o) =>
    (!gpu || o.gpu_model.toLowerCase().includes(gpu)) &&
    (!region || o.region.toLowerCase().includes(region)) &&
    o.gpus_free >= minGpus &&
    (maxHour === null || BigInt(o.price_per_gpu_hour) <= maxHour));
}

const LABELS = ["#", "Provider", "GPU", "Free", "Region", "Price / GPU-h", "Score", "Online", ""];

function cell(text: string, cls = ""): HTMLTableCellElement {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  return td;
}

function renderOffers(): void {
  const tbody = el('table[data-role="offers"] tbody');
  let list: Offer[];
  try {
    list = filtered();
  } catch (e) {
    error(e instanceof Error ? e.message : String(e));
    return;
  }
  const dec = config?.decimals ?? 0;
  tbody.replaceChildren();
  if (list.length === 0) {
    const tr = document.createElement("tr");
    tr.className = "empty";
    const td = cell(offers.length ? "no offer matches the filters" : "no offer in this market now");
    td.colSpan = 9;
    tr.append(td);
    tbody.append(tr);
    return;
  }
  for (const o of list) {
    const tr = document.createElement("tr");
    tr.dataset.provider = o.provider;
    if (chosen?.provider === o.provider) tr.classList.add("chosen");
    const online = o.online === false ? "offline" : o.online ? "online" : "checking";
    const runs = Boolean(o.endpoint);
    const b = document.createElement("button");
    b.type = "button";
    b.dataset.action = "choose";
    b.textContent = "Choose";
    const unusable = o.online === false || !runs || o.gpus_free < 1;
    // Rendered during an action: off until it ends, then as the offer allows (ui.busy).
    const acting = document.body.classList.contains("busy");
    if (acting) b.dataset.wasDisabled = unusable ? "1" : "";
    b.disabled = unusable || acting;
    b.title = !runs ? "this provider runs no containers" : o.online === false ? "its worker does not answer" : "";
    b.addEventListener("click", () => choose(o));
    const choose_td = document.createElement("td");
    choose_td.append(b);
    const short = `${o.provider.slice(0, 4)}…${o.provider.slice(-4)}`;
    tr.append(cell(String(o.rank)), cell(short, "addr"), cell(o.gpu_model), cell(`${o.gpus_free} / ${o.gpus_total}`, "num"),
      cell(o.region || "—"), cell(tokens(BigInt(o.price_per_gpu_hour), dec), "num"), cell(o.score.toFixed(3), "num"),
      cell(runs ? online : "no containers", `online-${online}`), choose_td);
    tr.querySelectorAll("td").forEach((td, i) => (td.dataset.label = LABELS[i] ?? ""));
    tbody.append(tr);
  }
}

function choose(o: Offer): void {
  chosen = o;
  show("rent-panel", true);
  setField("chosen", `${o.gpu_model} from provider ${o.provider} in ${o.region || "an unnamed region"}: ${tokens(BigInt(o.price_per_gpu_hour), config?.decimals ?? 0)} per GPU-hour, ${o.gpus_free} GPU(s) free.`, o.provider);
  renderOffers();
  updateCost();
  el('[data-role="rent-panel"]').scrollIntoView({ behavior: "smooth", block: "start" });
}

// ------------------------------------------------------------------ the rent form

function rentForm(): HTMLFormElement {
  return el<HTMLFormElement>('form[data-role="rent-form"]');
}

function formValue(name: string): string {
  return (rentForm().elements.namedItem(name) as HTMLInputElement | HTMLTextAreaElement).value.trim();
}

/** The deposit for the form's GPUs and hours at the chosen offer's price (shown, not sent). */
function updateCost(): void {
  if (!chosen || !config) return;
  try {
    const gpus = Number(formValue("gpus"));
    const micro = parseHours(formValue("hours"));
    const deposit = depositFor(BigInt(chosen.price_per_gpu_second), gpus, micro, windowSeconds);
    const perHour = BigInt(chosen.price_per_gpu_hour) * BigInt(gpus);
    setField("cost", tokens(deposit, config.decimals), deposit);
    setField("cost-detail", `(${tokens(perHour, config.decimals)} per hour for ${gpus} GPU(s); unused time is refunded)`);
  } catch (e) {
    setField("cost", "—", "");
    setField("cost-detail", e instanceof Error ? e.message : String(e));
  }
}

async function rent(): Promise<void> {
  if (!config) throw new Refusal("this node's configuration is not loaded yet; reload the page");
  if (!wallet) throw new Refusal("Connect a wallet first (button 1 · Wallet); nothing was sent.");
  if (!chosen) throw new Refusal("Choose an offer first; nothing was sent.");
  if (watch && !["closed", "cancelled", "completed", "failed", "declined"].includes(watch.state)) {
    throw new Refusal(`job ${watch.job} is still ${watch.state}; stop it before renting again, or open another tab`);
  }
  const gpus = Number(formValue("gpus"));
  if (!Number.isInteger(gpus) || gpus < 1 || gpus > 256) throw new Refusal("GPUs: a whole number 1..256");
  const command = shellSplit(formValue("command"));
  const spec: WorkloadSpec = { image: formValue("image") };
  if (!spec.image) throw new Refusal("Image: name the container image to run");
  if (command.length) spec.command = command;
  const ports = parsePorts(formValue("ports"));
  if (ports.length) spec.ports = ports;
  const committee = formValue("committee").split(",").map((s) => s.trim()).filter(Boolean);
  const bad = committee.find((k) => !BASE58.test(k));
  if (bad) throw new Refusal(`Committee: "${bad}" is not a validator authority address`);
  const maxPrice = (filtersForm().elements.namedItem("max-price") as HTMLInputElement).value.trim();
  const input = {
    gpus, microHours: parseHours(formValue("hours")), spec,
    secrets: parseEnvLines(formValue("secrets"), "Secrets"), committee,
    maxPricePerHour: maxPrice ? parseTokens(maxPrice, config.decimals, "max price") : null,
  };
  const rented = await createJob(wallet, config, chosen, input);
  startWatch(rented.job, rented.provider, rented.workloadHash);
  await balances();
  await deliver(wallet, rented);
  status(`workload delivered; waiting for provider ${rented.provider} to accept job ${rented.job} and start the container…`);
  history.replaceState(null, "", `${location.pathname}?job=${rented.job}`);
}

function startWatch(job: Address, provider: Address, workloadHash: Uint8Array): void {
  if (!wallet || !config) return;
  watch?.stop();
  show("receipt", false);
  watch = new Watch(wallet, config, job, provider, workloadHash);
  for (const a of ["top-up", "stop", "logs"]) {
    const b = el<HTMLButtonElement>(`button[data-action="${a}"]`);
    b.dataset.wasDisabled = ""; // on again (a job closed before left them off) once this action ends
  }
  watch.start();
}

async function reopenJob(job: Address): Promise<void> {
  if (!wallet) return;
  status(`opening job ${job}…`);
  const r = await reopen(wallet, job);
  startWatch(job, r.provider, r.workloadHash);
  status(`job ${job} is ${r.state}`);
}

// ------------------------------------------------------------------ the job panel

function needJob(): { w: Connected; c: Config; watch: Watch } {
  if (!wallet || !config || !watch) throw new Refusal("no job on this page yet");
  return { w: wallet, c: config, watch };
}

async function showLogs(): Promise<void> {
  const { w, watch: j } = needJob();
  status("sign the logs request in your wallet…");
  const text = await logs(w, j.job, j.provider, j.workloadHash);
  const pre = el('pre[data-role="logs"]');
  pre.textContent = text || "(no output yet)";
  pre.hidden = false;
  status("");
}

async function doTopUp(): Promise<void> {
  const { w, c, watch: j } = needJob();
  const hours = (el('input[name="top-up-hours"]') as HTMLInputElement).value;
  const amount = await topUp(w, c, j.job, parseHours(hours, "top-up hours"));
  status(`escrow topped up by ${tokens(amount, c.decimals)}`);
  await Promise.all([j.refresh(), balances()]);
}

async function doStop(): Promise<void> {
  const { w, c, watch: j } = needJob();
  const receipt = await stop(w, c, j.job);
  setField("receipt-deposited", tokens(receipt.deposited, c.decimals), receipt.deposited);
  setField("receipt-paid", tokens(receipt.paid, c.decimals), receipt.paid);
  setField("receipt-refunded", tokens(receipt.refunded, c.decimals), receipt.refunded);
  show("receipt", true);
  setField("paid", tokens(receipt.paid, c.decimals), receipt.paid);
  j.closed();
  await balances();
  status(`job ${j.job} closed: ${tokens(receipt.refunded, c.decimals)} refunded`);
}

// ------------------------------------------------------------------ start

async function start(): Promise<void> {
  for (const a of document.querySelectorAll('[data-nav="rent"]')) a.classList.add("active");
  config = await api<Config>("/v1/rent/config").catch((e) => {
    if (e instanceof NodeError && e.status === 404) throw new Refusal("This node does not relay renting (it runs without the rent relay); rent through another validator node.");
    throw e;
  });
  setField("chain", `on ${config.chain}`, config.chain);
  listWallets = watchWallets(chains(), (list) => {
    if (!el('[data-role="wallets"]').hidden) renderWallets(list);
  });
  const market = await api<{ params: { window_seconds: number } }>("/v1/dashboard/market");
  windowSeconds = BigInt(market.params.window_seconds);
  await loadOffers();
  window.setInterval(() => void loadOffers().catch(() => undefined), 10_000);
}

function wire(): void {
  el('[data-action="connect"]').addEventListener("click", openWallets);
  const filters = filtersForm();
  filters.addEventListener("submit", (e) => e.preventDefault());
  filters.addEventListener("input", () => {
    error("");
    renderOffers();
  });
  (filters.elements.namedItem("all") as HTMLInputElement).addEventListener("change", () => void action(loadOffers));
  const form = rentForm();
  form.addEventListener("input", updateCost);
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    void action(rent);
  });
  el('[data-action="logs"]').addEventListener("click", () => void action(showLogs));
  el('[data-action="top-up"]').addEventListener("click", () => void action(doTopUp));
  el('[data-action="stop"]').addEventListener("click", () => void action(doStop));
}

wire();
void action(start);
