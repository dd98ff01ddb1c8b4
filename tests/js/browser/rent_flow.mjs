// A user renting a GPU on a validator node's rent page (/dashboard/rent) in headless Chromium,
// with the test wallet (test_wallet.js) made from a keypair file. One scenario per run:
//
//   rent           connect, choose the provider, fill the form, rent; wait until the job runs
//                  and shows its endpoint (also at a phone's 390 px); [hold "running"]; read the
//                  logs (--expect-log), top up (--top-up-hours), stop, and read the receipt;
//   reject         the same up to "rent", with the wallet rejecting every request: the page's
//                  error, and nothing sent;
//   reject-delivery  the wallet signs the job's transaction and rejects the next request (the
//                  workload's delivery): the page's error, then stop and the receipt;
//   no-sol         a wallet without SOL for fees: the page's error, nothing asked or sent;
//   no-tokens      a wallet without enough tokens for the deposit: the same;
//   dead-provider  the form filled; [hold "chosen": the caller kills the provider's worker];
//                  rent: the page's error, nothing asked or sent;
//   price-raised   the form filled; [hold "chosen": the caller raises the provider's price];
//                  rent: the page's error, nothing asked or sent.
//
// Usage: node rent_flow.mjs --scenario S --url http://127.0.0.1:P/dashboard/rent --keypair F
//        --out DIR --provider B58 [--gpus 1] [--hours 0.02] [--image I] [--command C]
//        [--ports 8080] [--committee A,B] [--top-up-hours H] [--expect-log TEXT] [--hold]
//        [--timeout 150]
//
// With --hold it prints {"hold": STEP, ...} at each hold and waits (at most 90 s) for a line on
// stdin. Its last line is always one JSON result: {scenario, ok, failure, job, endpoint,
// endpoint_raw, figures (each data-raw read), receipt, error (the page's error text), status,
// wallet_requests, rpc_methods (JSON-RPC methods the page sent through the node, by count),
// leaks (requests carrying the secret key), problems (console errors, uncaught exceptions,
// failed requests), dialogs, screenshots, timings (ms from the start to each screenshot)}. Exit status 0 when the scenario reached its end.
// A PNG of every step goes to DIR (01-page.png, 02-connected.png, ...).

import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { parseArgs } from "node:util";
import { WALLET_NAME, launch, leaks, readKeypair, walletPage, within } from "./browser.mjs";

const SCENARIOS = ["rent", "reject", "reject-delivery", "no-sol", "no-tokens", "dead-provider",
  "price-raised"];
const { values: opt } = parseArgs({
  options: {
    scenario: { type: "string" },
    url: { type: "string" },
    keypair: { type: "string" },
    out: { type: "string" },
    provider: { type: "string" },
    gpus: { type: "string", default: "1" },
    hours: { type: "string", default: "0.02" },
    image: { type: "string", default: "localhost/gpum-busybox:1" },
    command: { type: "string", default: "httpd -f -p 8080 -h /www" },
    ports: { type: "string", default: "8080" },
    committee: { type: "string", default: "" },
    "top-up-hours": { type: "string", default: "" },
    "expect-log": { type: "string", default: "" },
    hold: { type: "boolean", default: false },
    timeout: { type: "string", default: "150" },
  },
});
for (const name of ["scenario", "url", "keypair", "out", "provider"]) {
  if (!opt[name]) {
    console.error(`rent_flow.mjs: --${name} is required`);
    process.exit(2);
  }
}
if (!SCENARIOS.includes(opt.scenario)) {
  console.error(`rent_flow.mjs: --scenario is one of ${SCENARIOS.join(", ")}`);
  process.exit(2);
}

const STEP_MS = 20_000;
const result = {
  scenario: opt.scenario, ok: false, failure: null, job: null, endpoint: null, endpoint_raw: null,
  figures: {}, receipt: null, error: null, status: null, wallet_requests: [], rpc_methods: {},
  leaks: [], problems: [], dialogs: [], screenshots: [], timings: {},
};
const T0 = Date.now();
const secret = readKeypair(opt.keypair);
mkdirSync(opt.out, { recursive: true });

// ----------------------------------------------------------------------------- holds

const stdin = createInterface({ input: process.stdin });
const lines = [];
const waiting = [];
stdin.on("line", (l) => (waiting.length ? waiting.shift()(l) : lines.push(l)));

async function hold(step, data = {}) {
  if (!opt.hold) return;
  console.log(JSON.stringify({ hold: step, ...data }));
  const line = lines.length ? lines.shift() : await within(90_000, `the caller's go after hold ${step}`,
    new Promise((r) => waiting.push(r)));
  if (line.trim() !== "go") throw new Error(`hold ${step}: the caller said ${JSON.stringify(line)}`);
}

// ----------------------------------------------------------------------------- page reading

let page;
let shots = 0;

async function shot(name) {
  shots += 1;
  const path = join(opt.out, `${String(shots).padStart(2, "0")}-${name}.png`);
  result.timings[name] = Date.now() - T0;
  await page.screenshot({ path, fullPage: true });
  result.screenshots.push(path);
}

/** The page's state in one read: error and status texts, every data-field's data-raw. */
function snapshot() {
  return page.evaluate(() => {
    const shown = (el) => el && !el.hidden && !el.closest("[hidden]") && getComputedStyle(el).display !== "none"
      && getComputedStyle(el).visibility !== "hidden";
    const text = (sel) => {
      const el = document.querySelector(sel);
      return shown(el) ? el.textContent.trim() : null;
    };
    const fields = {};
    for (const el of document.querySelectorAll("[data-field]")) {
      const name = el.getAttribute("data-field");
      if (!(name in fields)) fields[name] = { raw: el.getAttribute("data-raw"), text: el.textContent.trim(), shown: shown(el) };
    }
    return { error: text('[data-role="error"]') || null, status: text('[data-role="status"]'), fields };
  });
}

/** Polls `fn` (evaluated in the page) until truthy; the failure says what and shows the page. */
async function until(what, fn, arg, ms = STEP_MS) {
  try {
    const handle = await page.waitForFunction(fn, { timeout: ms, polling: 250 }, arg);
    return await handle.jsonValue();
  } catch (e) {
    const s = await snapshot().catch(() => ({}));
    throw new Error(`${what}: not within ${ms / 1000} s (page error: ${JSON.stringify(s.error)}, status: ${JSON.stringify(s.status)}; ${e.message.split("\n")[0]})`);
  }
}

const SHOWN = `(el) => el && !el.hidden && !el.closest("[hidden]") && getComputedStyle(el).display !== "none"`;

/** Waits until the page shows an error: its text. */
async function pageError(what, ms = STEP_MS) {
  return until(what, new Function("sel", `const shown = ${SHOWN};
    const el = document.querySelector(sel);
    return shown(el) && el.textContent.trim() ? el.textContent.trim() : false;`), '[data-role="error"]', ms);
}

async function noErrorYet() {
  const s = await snapshot();
  if (s.error) throw new Error(`the page shows an error: ${s.error}`);
}

async function fill(form, name, value) {
  const sel = `${form} [name="${name}"]`;
  const el = await page.$(sel);
  if (!el) throw new Error(`the page has no ${sel}`);
  await el.evaluate((e) => {
    e.value = "";
    e.dispatchEvent(new Event("input", { bubbles: true }));
  });
  if (value !== "") await el.type(value);
  await el.evaluate((e) => e.dispatchEvent(new Event("change", { bubbles: true })));
}

async function click(sel, what) {
  await until(`${what} (${sel}) enabled`, new Function("sel", `const shown = ${SHOWN};
    const el = document.querySelector(sel);
    return shown(el) && !el.disabled;`), sel);
  await page.click(sel);
}

function figure(s, name) {
  const f = s.fields[name];
  if (f) result.figures[name] = f.raw;
  return f ? f.raw : null;
}

// ----------------------------------------------------------------------------- steps

async function connect() {
  await page.goto(opt.url, { waitUntil: "load" });
  await shot("page");
  await click('button[data-action="connect"]', "the connect button");
  const choice = `[data-role="wallets"] button[data-wallet="${WALLET_NAME}"]`;
  await click(choice, "the test wallet among the wallets");
  const address = await page.evaluate(() => window.gpumTestWallet.address);
  await until("the connected wallet's address, SOL and tokens", (a) => {
    const raw = (n) => {
      const el = document.querySelector(`[data-field="${n}"]`);
      return el ? el.getAttribute("data-raw") : null;
    };
    return raw("wallet") === a && /^\d+$/.test(raw("wallet-sol") || "") && /^\d+$/.test(raw("wallet-tokens") || "");
  }, address);
  const s = await snapshot();
  for (const n of ["wallet", "wallet-sol", "wallet-tokens"]) figure(s, n);
  await shot("connected");
}

async function chooseAndFill() {
  const row = `table[data-role="offers"] tbody tr[data-provider="${opt.provider}"]`;
  await until(`the provider ${opt.provider} among the offers`, (sel) => document.querySelector(sel), row);
  await shot("offers");
  await click(`${row} button[data-action="choose"]`, `choosing ${opt.provider}`);
  const form = 'form[data-role="rent-form"]';
  await until("the rent form", new Function("sel", `return (${SHOWN})(document.querySelector(sel));`), form);
  for (const [name, value] of [["gpus", opt.gpus], ["hours", opt.hours], ["image", opt.image],
    ["command", opt.command], ["ports", opt.ports], ["committee", opt.committee]]) {
    await fill(form, name, value);
  }
  await until("the deposit priced", () => {
    const el = document.querySelector('[data-field="cost"]');
    return el && /^[1-9]\d*$/.test(el.getAttribute("data-raw") || "");
  });
  figure(await snapshot(), "cost");
  await shot("form");
}

/** Rent is clicked (if the page lets the user click it). */
async function clickRent() {
  const enabled = await page.$eval('button[data-action="rent"]', (b) => !b.disabled).catch(() => false);
  if (enabled) await page.click('button[data-action="rent"]');
  return enabled;
}

async function refused(what) {
  result.figures.rent_clickable = await clickRent();
  result.error = await pageError(what);
  // Nothing may follow a refusal: give a late transaction the time to show up.
  await new Promise((r) => setTimeout(r, 2_000));
  await shot("refused");
}

async function rent() {
  await clickRent();
  const job = await until("the job panel with the job's address", () => {
    const el = document.querySelector('[data-field="job"]');
    return el && el.getAttribute("data-raw");
  }, undefined, 60_000);
  result.job = job;
  await until("the job running with its endpoint", () => {
    const raw = (n) => (document.querySelector(`[data-field="${n}"]`) || { getAttribute: () => null }).getAttribute("data-raw");
    const err = document.querySelector('[data-role="error"]');
    if (err && !err.hidden && err.textContent.trim()) return true; // reported below
    try {
      return raw("state") === "running" && JSON.parse(raw("endpoint") || "[]").length > 0;
    } catch {
      return false;
    }
  }, undefined, 90_000);
  await noErrorYet();
  let s = await snapshot();
  result.endpoint = s.fields.endpoint.text;
  result.endpoint_raw = JSON.parse(s.fields.endpoint.raw);
  for (const n of ["job", "state", "runway", "windows", "paid", "cost"]) figure(s, n);
  await shot("running");
  // The same page as wide as a phone: nothing wider than the screen. (isMobile or hasTouch
  // would make puppeteer reload the page, and lose the job's panel.)
  await page.setViewport({ width: 390, height: 844 });
  result.figures.phone_scroll_width = await page.evaluate(() => document.documentElement.scrollWidth);
  await shot("running-phone");
  await page.setViewport({ width: 1280, height: 900 });
  await hold("running", { job, endpoint: result.endpoint_raw });

  if (opt["expect-log"]) {
    await click('button[data-action="logs"]', "the logs button");
    await until(`the logs showing ${JSON.stringify(opt["expect-log"])}`, (t) => {
      const el = document.querySelector('pre[data-role="logs"]');
      return el && el.textContent.includes(t);
    }, opt["expect-log"]);
    await noErrorYet();
    await shot("logs");
  }
  if (opt["top-up-hours"]) {
    s = await snapshot();
    const tokensBefore = BigInt(s.fields["wallet-tokens"].raw);
    const requests = await page.evaluate(() => window.gpumTestWallet.requests.length);
    await fill("body", "top-up-hours", opt["top-up-hours"]);
    await click('button[data-action="top-up"]', "the top-up button");
    await until("the top-up signed", (n) => window.gpumTestWallet.requests.length > n, requests);
    await until("the wallet's tokens lowered by the top-up", (before) => {
      const el = document.querySelector('[data-field="wallet-tokens"]');
      const err = document.querySelector('[data-role="error"]');
      return (err && !err.hidden && err.textContent.trim()) || (el && BigInt(el.getAttribute("data-raw")) < BigInt(before));
    }, String(tokensBefore), 30_000);
    await noErrorYet();
    s = await snapshot();
    result.figures.top_up = String(tokensBefore - BigInt(s.fields["wallet-tokens"].raw));
    figure(s, "runway");
    await shot("top-up");
  }
  await stopAndReceipt();
}

/** Stop, and the receipt the page shows once the job is closed. */
async function stopAndReceipt() {
  await click('button[data-action="stop"]', "the stop button");
  await shot("stopping");
  await until("the receipt", () => {
    const r = document.querySelector('[data-role="receipt"]');
    const err = document.querySelector('[data-role="error"]');
    if (err && !err.hidden && err.textContent.trim()) return true;
    const raw = (n) => (document.querySelector(`[data-field="${n}"]`) || { getAttribute: () => null }).getAttribute("data-raw");
    return r && !r.hidden && ["receipt-deposited", "receipt-paid", "receipt-refunded"].every((n) => /^\d+$/.test(raw(n) || ""));
  }, undefined, 90_000);
  await noErrorYet();
  const s = await snapshot();
  result.receipt = {
    deposited: s.fields["receipt-deposited"].raw, paid: s.fields["receipt-paid"].raw,
    refunded: s.fields["receipt-refunded"].raw,
  };
  for (const n of ["state", "paid", "windows", "wallet-tokens", "wallet-sol"]) figure(s, n);
  await shot("receipt");
}

async function scenario() {
  await connect();
  await chooseAndFill();
  switch (opt.scenario) {
    case "rent":
      await rent();
      break;
    case "reject":
      await page.evaluate(() => (window.gpumTestWallet.rejectAll = true));
      await refused("the page saying the signature was rejected");
      break;
    case "no-sol":
      await refused("the page saying the wallet has no SOL for fees");
      break;
    case "no-tokens":
      await refused("the page saying the wallet has too few tokens");
      break;
    case "reject-delivery":
      await page.evaluate(() => (window.gpumTestWallet.rejectRequest = 2));
      await clickRent();
      result.error = await pageError("the page saying the delivery was rejected", 60_000);
      result.job = await page.evaluate(() => {
        const el = document.querySelector('[data-field="job"]');
        return el && el.getAttribute("data-raw");
      });
      figure(await snapshot(), "state");
      await shot("rejected");
      await stopAndReceipt();
      break;
    case "dead-provider":
      await hold("chosen", { provider: opt.provider });
      await refused("the page saying the provider is offline");
      break;
    case "price-raised":
      await hold("chosen", { provider: opt.provider });
      await refused("the page saying the provider raised its price");
      break;
  }
  result.ok = true;
}

// ----------------------------------------------------------------------------- main

function rpcMethods(sent) {
  const counts = {};
  for (const r of sent) {
    if (r.method !== "POST" || !r.url.includes("/v1/rent/rpc")) continue;
    let method = "?";
    try {
      method = JSON.parse(r.body).method || "?";
    } catch {
      /* counted as "?" */
    }
    counts[method] = (counts[method] || 0) + 1;
  }
  return counts;
}

async function main() {
  const browser = await launch();
  try {
    const opened = await walletPage(browser, secret, {}, { timeoutMs: STEP_MS });
    page = opened.page;
    page.on("dialog", async (d) => {
      result.dialogs.push(d.message());
      await d.accept();
    });
    try {
      await scenario();
    } catch (e) {
      result.failure = e.message;
      await shot("failure").catch(() => {});
    } finally {
      const s = await snapshot().catch(() => null);
      if (s) {
        result.error = result.error || s.error;
        result.status = s.status;
      }
      result.wallet_requests = await page.evaluate(() => window.gpumTestWallet.requests).catch(() => []);
      result.rpc_methods = rpcMethods(opened.sent);
      result.leaks = leaks(opened.sent, secret);
      result.problems = opened.problems;
    }
  } finally {
    await within(10_000, "closing chromium", browser.close()).catch(() => {});
  }
}

within(Number(opt.timeout) * 1000, `the ${opt.scenario} scenario`, main())
  .catch((e) => {
    result.failure = result.failure || e.message;
  })
  .finally(() => {
    result.ok = result.ok && !result.failure;
    console.log(JSON.stringify(result));
    process.exit(result.ok ? 0 : 1);
  });
