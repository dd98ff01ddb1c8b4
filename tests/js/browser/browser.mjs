// Headless Chromium (Debian's /usr/bin/chromium) driven by puppeteer-core, with the test wallet
// (test_wallet.js) injected into every document before the page's own scripts run.
//
// Guarantees: every browser call is bounded (launch, protocol calls, navigation, waits); the
// page's console errors, uncaught exceptions and failed requests are collected in `problems`;
// every request the page sends is kept (`sent`: method, URL, body) so a caller can prove that
// no key left the browser.

import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import puppeteer from "puppeteer-core";

const HERE = dirname(fileURLToPath(import.meta.url));
export const WALLET_SOURCE = readFileSync(join(HERE, "test_wallet.js"), "utf8");
export const WALLET_NAME = "gpum test wallet";

export function chromiumPath() {
  return process.env.GPUM_CHROMIUM || "/usr/bin/chromium";
}

export async function launch({ timeoutMs = 30_000 } = {}) {
  return puppeteer.launch({
    executablePath: chromiumPath(),
    headless: true,
    // Over a pipe, Chromium exits with this process even when it is killed (over a websocket it
    // would be left running).
    pipe: true,
    timeout: timeoutMs,
    protocolTimeout: timeoutMs,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
      "--hide-scrollbars", "--disable-extensions", "--disable-background-networking"],
  });
}

/** A solana keypair file (a JSON array of 64 numbers) -> its 64 bytes. */
export function readKeypair(path) {
  const bytes = JSON.parse(readFileSync(path, "utf8"));
  if (!Array.isArray(bytes) || bytes.length !== 64) throw new Error(`${path} is not a 64-byte keypair file`);
  return Uint8Array.from(bytes);
}

/**
 * A new page of `browser` with the test wallet of `secretKey` (64 bytes) and its knobs
 * (`rejectAll`, `rejectRequest`, `rejectConnect`) installed before any page script.
 * Answers { page, problems, sent }.
 */
export async function walletPage(browser, secretKey, knobs = {}, { width = 1280, height = 900, timeoutMs = 20_000 } = {}) {
  const page = await browser.newPage();
  page.setDefaultTimeout(timeoutMs);
  page.setDefaultNavigationTimeout(timeoutMs);
  await page.setViewport({ width, height });
  const problems = [];
  const sent = [];
  page.on("console", (msg) => {
    if (msg.type() !== "error") return;
    const where = msg.location() && msg.location().url ? ` (${msg.location().url})` : "";
    problems.push(`console: ${msg.text()}${where}`);
  });
  page.on("pageerror", (err) => problems.push(`uncaught: ${err.message}`));
  page.on("requestfailed", (req) => {
    const why = req.failure() ? req.failure().errorText : "failed";
    // A navigation away cancels what was in flight: not the page's fault.
    if (why !== "net::ERR_ABORTED") problems.push(`request failed: ${req.method()} ${req.url()}: ${why}`);
  });
  page.on("request", (req) => sent.push({ method: req.method(), url: req.url(), body: req.postData() || "" }));
  const config = JSON.stringify({ secretKey: Array.from(secretKey), ...knobs });
  await page.evaluateOnNewDocument(`${WALLET_SOURCE}\n;globalThis.gpumInstallTestWallet(${config});`);
  return { page, problems, sent };
}

/** Every encoding of `secretKey` (or its seed) a careless page might send. */
export function secretEncodings(secretKey) {
  const seed = secretKey.slice(0, 32);
  const out = [];
  for (const bytes of [secretKey, seed]) {
    const buf = Buffer.from(bytes);
    out.push(buf.toString("hex"), buf.toString("base64"), buf.toString("base64url"), base58(bytes),
      JSON.stringify(Array.from(bytes)), Array.from(bytes).join(","));
  }
  return out;
}

/** The requests in `sent` whose URL or body carries the secret key in some encoding. */
export function leaks(sent, secretKey) {
  const needles = secretEncodings(secretKey);
  return sent.filter((r) => needles.some((n) => r.body.includes(n) || r.url.includes(n))).map((r) => `${r.method} ${r.url}`);
}

const B58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz";
export function base58(bytes) {
  let n = 0n;
  for (const b of bytes) n = n * 256n + BigInt(b);
  let out = "";
  while (n > 0n) {
    out = B58[Number(n % 58n)] + out;
    n /= 58n;
  }
  for (const b of bytes) {
    if (b !== 0) break;
    out = "1" + out;
  }
  return out;
}

/** Rejects with `what` after `ms` unless `promise` settles first. */
export function within(ms, what, promise) {
  let timer;
  const limit = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not within ${Math.round(ms / 1000)} s`)), ms);
  });
  return Promise.race([promise, limit]).finally(() => clearTimeout(timer));
}
