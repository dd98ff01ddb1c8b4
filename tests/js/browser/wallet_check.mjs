// The test wallet (test_wallet.js) alone, in headless Chromium, against an app page served from
// a temporary folder on 127.0.0.1: discovered through the Wallet Standard's events in both
// orders (wallet first: the app's app-ready; app first: the wallet's register-wallet), connect,
// events, disconnect, legacy and v0 transactions built and checked with @solana/web3.js (the
// wallet a second signer and a fee payer), messages checked with node's own Ed25519 (OpenSSL,
// not the browser's), and every rejection knob. Asserts as it goes; prints one JSON line
// {"ok": true, "checks": [...]} or {"ok": false, "error": ...} (exit 1).
//
// Usage: node wallet_check.mjs   (GPUM_CHROMIUM overrides /usr/bin/chromium)

import assert from "node:assert/strict";
import { createPublicKey, verify } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import web3 from "@solana/web3.js";
import { WALLET_NAME, WALLET_SOURCE, base58, launch, leaks, walletPage, within } from "./browser.mjs";

const { Keypair, PublicKey, SystemProgram, Transaction, TransactionMessage, VersionedTransaction } = web3;

// The app's half of the Wallet Standard, as @wallet-standard/app's getWallets() does it.
const APP_HTML = `<!doctype html><meta charset="utf-8"><title>wallet check</title>
<script>
  window.found = [];
  const api = Object.freeze({ register: (...ws) => { for (const w of ws) if (!found.includes(w)) found.push(w); return () => {}; } });
  window.addEventListener("wallet-standard:register-wallet", ({ detail: callback }) => callback(api));
  class AppReadyEvent extends Event {
    #api;
    constructor(a) { super("wallet-standard:app-ready", { bubbles: false, cancelable: false, composed: false }); this.#api = a; }
    get detail() { return this.#api; }
  }
  window.dispatchEvent(new AppReadyEvent(api));
</script><p>app</p>`;

function spki(pub) {
  return createPublicKey({ key: Buffer.concat([Buffer.from("302a300506032b6570032100", "hex"), Buffer.from(pub)]), format: "der", type: "spki" });
}

async function main() {
  const checks = [];
  const ok = (name) => checks.push(name);
  const dir = mkdtempSync(join(tmpdir(), "gpum-wallet-check-"));
  writeFileSync(join(dir, "index.html"), APP_HTML);
  const server = createServer((req, res) => {
    res.writeHead(200, { "content-type": "text/html; charset=utf-8", "content-security-policy": "default-src 'self'; script-src 'self' 'unsafe-inline'" });
    res.end(APP_HTML);
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  const url = `http://127.0.0.1:${server.address().port}/`;
  const browser = await launch();
  try {
    const user = Keypair.generate();
    const other = Keypair.generate();
    const { page, problems, sent } = await walletPage(browser, user.secretKey);
    await page.goto(url, { waitUntil: "load" });

    // Discovered (wallet injected first, the app's app-ready registers it).
    const info = await page.evaluate(async () => {
      const w = window.found[0];
      return { n: window.found.length, name: w.name, version: w.version, chains: w.chains, icon: w.icon.slice(0, 26),
        features: Object.keys(w.features).sort(), versions: w.features["solana:signTransaction"].supportedTransactionVersions,
        accounts: w.accounts.length, ready: await window.gpumTestWallet.ready };
    });
    assert.deepEqual(info, { n: 1, name: WALLET_NAME, version: "1.0.0", chains: ["solana:localnet"], icon: "data:image/svg+xml;base64,",
      features: ["solana:signMessage", "solana:signTransaction", "standard:connect", "standard:disconnect", "standard:events"],
      versions: ["legacy", 0], accounts: 0, ready: true });
    ok("discovered through app-ready, with its name, chain and features");

    // Connect: one account, its address the keypair's; a change event.
    const connected = await page.evaluate(async () => {
      const w = window.found[0];
      window.changes = [];
      w.features["standard:events"].on("change", (p) => window.changes.push(p.accounts.map((a) => a.address)));
      const { accounts } = await w.features["standard:connect"].connect();
      return { addresses: accounts.map((a) => a.address), pub: Array.from(accounts[0].publicKey), changes: window.changes,
        features: accounts[0].features, chains: accounts[0].chains, exposed: JSON.stringify(window.gpumTestWallet) };
    });
    assert.deepEqual(connected.addresses, [user.publicKey.toBase58()]);
    assert.deepEqual(connected.pub, Array.from(user.publicKey.toBytes()));
    assert.deepEqual(connected.changes, [[user.publicKey.toBase58()]]);
    assert.deepEqual(connected.chains, ["solana:localnet"]);
    assert.ok(connected.features.includes("solana:signTransaction") && connected.features.includes("solana:signMessage"));
    assert.equal(base58(user.publicKey.toBytes()), user.publicKey.toBase58());
    assert.ok(!connected.exposed.includes(Array.from(user.secretKey.slice(0, 8)).join(",")), connected.exposed);
    ok("connect answers the keypair's account and emits change");

    const signTx = (bytes, knobs = {}) => page.evaluate(async (bytes, knobs) => {
      Object.assign(window.gpumTestWallet, knobs);
      const w = window.found[0];
      const account = w.accounts[0];
      try {
        const [{ signedTransaction }] = await w.features["solana:signTransaction"].signTransaction(
          { account, transaction: Uint8Array.from(bytes), chain: "solana:localnet" });
        return { bytes: Array.from(signedTransaction) };
      } catch (e) {
        return { error: e.message, code: e.code };
      }
    }, Array.from(bytes), knobs);
    const blockhash = base58(Uint8Array.from({ length: 32 }, (_, i) => i + 1));

    // Legacy: the other key pays and signs first; the wallet is the second signer.
    const legacy = new Transaction({ feePayer: other.publicKey, recentBlockhash: blockhash }).add(
      SystemProgram.transfer({ fromPubkey: user.publicKey, toPubkey: other.publicKey, lamports: 5 }));
    legacy.partialSign(other);
    const legacyBytes = legacy.serialize({ requireAllSignatures: false });
    const signedLegacy = await signTx(legacyBytes);
    assert.ok(signedLegacy.bytes, JSON.stringify(signedLegacy));
    const back = Transaction.from(Buffer.from(signedLegacy.bytes));
    assert.equal(back.signatures[1].publicKey.toBase58(), user.publicKey.toBase58());
    assert.ok(back.verifySignatures(true), "the legacy transaction's signatures verify");
    assert.deepEqual(back.signatures[0].signature, legacy.signatures[0].signature);
    ok("signs a legacy transaction in its own slot (second signer), the fee payer's signature kept");

    // v0: the wallet pays; another signer's slot stays empty.
    const msg = new TransactionMessage({ payerKey: user.publicKey, recentBlockhash: blockhash, instructions: [
      SystemProgram.transfer({ fromPubkey: other.publicKey, toPubkey: user.publicKey, lamports: 7 })] }).compileToV0Message();
    const v0 = new VersionedTransaction(msg);
    const signedV0 = await signTx(v0.serialize());
    assert.ok(signedV0.bytes, JSON.stringify(signedV0));
    const v0back = VersionedTransaction.deserialize(Uint8Array.from(signedV0.bytes));
    assert.equal(v0back.version, 0);
    const message = v0back.message.serialize();
    assert.ok(verify(null, message, spki(user.publicKey.toBytes()), Buffer.from(v0back.signatures[0])), "v0 signature verifies");
    assert.deepEqual(Array.from(v0back.signatures[1]), new Array(64).fill(0));
    ok("signs a v0 transaction as fee payer (slot 0), other slots untouched");

    // A transaction the wallet need not sign is refused, saying so.
    const foreign = new Transaction({ feePayer: other.publicKey, recentBlockhash: blockhash }).add(
      SystemProgram.transfer({ fromPubkey: other.publicKey, toPubkey: user.publicKey, lamports: 1 }));
    const refused = await signTx(foreign.serialize({ requireAllSignatures: false }));
    assert.match(refused.error, /does not need the signature of/);
    ok("refuses a transaction that does not need its key");

    // signMessage: verified by node's Ed25519.
    const text = new TextEncoder().encode("gpu-market workload request 1");
    const sm = await page.evaluate(async (bytes) => {
      const w = window.found[0];
      const [r] = await w.features["solana:signMessage"].signMessage({ account: w.accounts[0], message: Uint8Array.from(bytes) });
      return { sig: Array.from(r.signature), signed: Array.from(r.signedMessage), type: r.signatureType };
    }, Array.from(text));
    assert.deepEqual(sm.signed, Array.from(text));
    assert.equal(sm.type, "ed25519");
    assert.ok(verify(null, Buffer.from(text), spki(user.publicKey.toBytes()), Buffer.from(sm.sig)), "message signature verifies");
    ok("signs a message (node's Ed25519 verifies it)");

    // Rejections: the N-th request, then all; the error's message and code; nothing signed.
    const done = await page.evaluate(() => window.gpumTestWallet.requests.length);
    assert.equal(done, 3); // legacy, v0, message (the refused one asked nobody)
    const nth = await signTx(legacyBytes, { rejectRequest: done + 1 });
    assert.deepEqual(nth, { error: "User rejected the request.", code: 4001 });
    const after = await signTx(legacyBytes, { rejectRequest: 0 });
    assert.ok(after.bytes, "the request after a rejected one is approved");
    const all = await signTx(legacyBytes, { rejectAll: true });
    assert.deepEqual(all, { error: "User rejected the request.", code: 4001 });
    const msgRejected = await page.evaluate(async () => {
      const w = window.found[0];
      try {
        await w.features["solana:signMessage"].signMessage({ account: w.accounts[0], message: new Uint8Array([1]) });
        return null;
      } catch (e) {
        return { error: e.message, code: e.code };
      }
    });
    assert.deepEqual(msgRejected, { error: "User rejected the request.", code: 4001 });
    const log = await page.evaluate(() => window.gpumTestWallet.requests.map((r) => [r.kind, r.approved]));
    assert.deepEqual(log, [["transaction", true], ["transaction", true], ["message", true], ["transaction", false],
      ["transaction", true], ["transaction", false], ["message", false]]);
    ok("rejects the N-th request or all of them with 'User rejected the request.' (code 4001), records every request");

    // Disconnect: no account, a change event; signing needs a connection again.
    const disc = await page.evaluate(async () => {
      const w = window.found[0];
      window.gpumTestWallet.rejectAll = false;
      await w.features["standard:disconnect"].disconnect();
      let error = null;
      try {
        await w.features["solana:signMessage"].signMessage({ account: { address: window.gpumTestWallet.address }, message: new Uint8Array([1]) });
      } catch (e) {
        error = e.message;
      }
      return { accounts: w.accounts.length, changes: window.changes.length, error, silent: (await w.features["standard:connect"].connect({ silent: true })).accounts.length };
    });
    assert.deepEqual(disc, { accounts: 0, changes: 2, error: "the test wallet is not connected", silent: 0 });
    ok("disconnect empties its accounts and emits change; a silent connect asks nothing");

    // rejectConnect.
    const rc = await page.evaluate(async () => {
      window.gpumTestWallet.rejectConnect = true;
      try {
        await window.found[0].features["standard:connect"].connect();
        return null;
      } catch (e) {
        return { error: e.message, code: e.code };
      }
    });
    assert.deepEqual(rc, { error: "User rejected the request.", code: 4001 });
    ok("rejectConnect rejects connecting");
    assert.deepEqual(leaks(sent, user.secretKey), []);
    assert.deepEqual(problems, []);
    await page.close();

    // App first: the wallet installed after the app listens registers through register-wallet.
    const late = await browser.newPage();
    await late.goto(url, { waitUntil: "load" });
    const lateInfo = await late.evaluate(`${WALLET_SOURCE}\n;globalThis.gpumInstallTestWallet({secretKey: ${JSON.stringify(Array.from(user.secretKey))}});
      window.found.map((w) => w.name)`);
    assert.deepEqual(lateInfo, [WALLET_NAME]);
    ok("discovered through register-wallet when the app listened first");
    await late.close();

    // A keypair whose public half is not its seed's: no connection, no signature.
    const bad = Uint8Array.from(user.secretKey);
    bad.set(other.publicKey.toBytes(), 32);
    const { page: badPage } = await walletPage(browser, bad);
    await badPage.goto(url, { waitUntil: "load" });
    const badConnect = await badPage.evaluate(async () => {
      try {
        await window.found[0].features["standard:connect"].connect();
        return null;
      } catch (e) {
        return e.message;
      }
    });
    assert.equal(badConnect, "the keypair's public key does not match its seed");
    ok("a keypair whose public key does not match its seed cannot connect");
    await badPage.close();
  } finally {
    await browser.close();
    server.close();
    rmSync(dir, { recursive: true, force: true });
  }
  return checks;
}

within(90_000, "the wallet check", main()).then(
  (checks) => {
    console.log(JSON.stringify({ ok: true, checks }));
    process.exit(0);
  },
  (e) => {
    console.log(JSON.stringify({ ok: false, error: String(e && e.stack ? e.stack : e) }));
    process.exit(1);
  },
);
