/*
 * A Wallet Standard wallet for tests, self-contained (no bundler, no import): injected into a
 * page before its scripts run (puppeteer's evaluateOnNewDocument), it registers itself with the
 * page exactly as a browser extension would, through the standard's two window events:
 *
 *   - it dispatches `wallet-standard:register-wallet` whose `detail` is a callback taking the
 *     app's `{ register }` API (an app already listening registers it at once), and
 *   - it answers every later `wallet-standard:app-ready` event (whose `detail` is that API) by
 *     registering itself, so an app that starts listening after the wallet still finds it.
 *
 * The wallet is named "gpum test wallet", holds one account made from a local Solana keypair
 * (the 64 bytes of a keypair file: 32-byte seed, then the public key), on chain
 * "solana:localnet", and signs with WebCrypto's Ed25519 in the page. Features:
 * standard:connect, standard:disconnect, standard:events ("change"), solana:signTransaction
 * (legacy and v0 wire transactions: the message bytes are signed and the signature written in
 * the slot of the wallet's key among the transaction's signers) and solana:signMessage.
 *
 * Guarantees: the secret never leaves this script's closure (nothing on `window` exposes it,
 * nothing is sent anywhere); the keypair's public half is checked against the seed before
 * anything is signed (a mismatch fails every connect and signature); a transaction the wallet's
 * key does not have to sign, of an unknown version, or malformed, is refused with an Error
 * saying which; a rejected request throws an Error whose message is "User rejected the
 * request." and whose `code` is 4001 (as EIP-1193 and the Solana wallets do) and signs
 * nothing.
 *
 * The driver's knobs live on `window.gpumTestWallet` (everything else there is read-only):
 *   rejectConnect  true: every connect is rejected;
 *   rejectAll      true: every signing request (a transaction or a message) is rejected;
 *   rejectRequest  N (1-based): the N-th signing request is rejected, the others approved;
 *   requests       what the page asked to sign, in order: {kind: "transaction"|"message",
 *                  count, approved, at} (one entry per request, `count` its inputs).
 * Install: `gpumInstallTestWallet({secretKey: [64 numbers], ...knobs})`, defined by this file.
 */
(function () {
  "use strict";

  const NAME = "gpum test wallet";
  const CHAINS = ["solana:localnet"];
  const ICON =
    "data:image/svg+xml;base64," +
    btoa(
      '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32"><rect width="32" height="32" ' +
        'rx="6" fill="#2a6f97"/><text x="16" y="21" font-size="14" text-anchor="middle" ' +
        'fill="#fff" font-family="sans-serif">gt</text></svg>',
    );
  const PKCS8_ED25519_PREFIX = new Uint8Array([
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
  ]);
  const REJECTED = "User rejected the request.";

  function rejected() {
    const e = new Error(REJECTED);
    e.code = 4001;
    return e;
  }

  const B58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz";

  function base58(bytes) {
    const digits = [];
    for (const byte of bytes) {
      let carry = byte;
      for (let i = 0; i < digits.length; i++) {
        carry += digits[i] << 8;
        digits[i] = carry % 58;
        carry = (carry / 58) | 0;
      }
      while (carry > 0) {
        digits.push(carry % 58);
        carry = (carry / 58) | 0;
      }
    }
    let out = "";
    for (const byte of bytes) {
      if (byte !== 0) break;
      out += "1";
    }
    for (let i = digits.length - 1; i >= 0; i--) out += B58[digits[i]];
    return out;
  }

  function b64urlDecode(s) {
    const b = atob(s.replace(/-/g, "+").replace(/_/g, "/") + "===".slice((s.length + 3) % 4));
    return Uint8Array.from(b, (c) => c.charCodeAt(0));
  }

  function equalBytes(a, b) {
    if (a.length !== b.length) return false;
    for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
    return true;
  }

  /** A compact-u16 ("shortvec") at `offset`: [value, bytes read]. */
  function shortvec(bytes, offset) {
    let value = 0;
    for (let i = 0; i < 3; i++) {
      if (offset + i >= bytes.length) throw new Error("malformed transaction: truncated length");
      const b = bytes[offset + i];
      value |= (b & 0x7f) << (7 * i);
      if ((b & 0x80) === 0) return [value, i + 1];
    }
    throw new Error("malformed transaction: length longer than 3 bytes");
  }

  /**
   * Where a wire transaction's message starts, and the signature slot of `key` in it.
   * Legacy: the message starts with its 3-byte header; v0: with 0x80, then the header.
   */
  function signatureSlot(tx, key) {
    const [nsig, n] = shortvec(tx, 0);
    const sigStart = n;
    const msgStart = sigStart + 64 * nsig;
    if (msgStart >= tx.length) throw new Error("malformed transaction: no message");
    let h = msgStart;
    if (tx[h] & 0x80) {
      const version = tx[h] & 0x7f;
      if (version !== 0) throw new Error(`unsupported transaction version ${version}`);
      h += 1;
    }
    const required = tx[h];
    if (required !== nsig) {
      throw new Error(`malformed transaction: ${nsig} signature slots for ${required} signers`);
    }
    const [nkeys, m] = shortvec(tx, h + 3);
    const keysStart = h + 3 + m;
    if (keysStart + 32 * nkeys > tx.length || nkeys < required) {
      throw new Error("malformed transaction: account keys truncated");
    }
    for (let i = 0; i < required; i++) {
      const at = keysStart + 32 * i;
      if (equalBytes(tx.subarray(at, at + 32), key)) {
        return { message: tx.subarray(msgStart), slot: sigStart + 64 * i };
      }
    }
    throw new Error(`this transaction does not need the signature of ${base58(key)}`);
  }

  function install(config) {
    const secret = Uint8Array.from(config.secretKey || []);
    if (secret.length !== 64) throw new Error("the test wallet needs a 64-byte Solana keypair");
    const seed = secret.slice(0, 32);
    const publicKey = secret.slice(32, 64);
    const address = base58(publicKey);
    const subtle = globalThis.crypto && globalThis.crypto.subtle;
    if (!subtle) throw new Error("the test wallet needs WebCrypto (a secure context)");

    const control = {
      rejectConnect: Boolean(config.rejectConnect),
      rejectAll: Boolean(config.rejectAll),
      rejectRequest: Number(config.rejectRequest || 0),
      requests: [],
    };
    Object.defineProperty(control, "address", { value: address, enumerable: true });
    Object.defineProperty(control, "name", { value: NAME, enumerable: true });

    const pkcs8 = new Uint8Array(PKCS8_ED25519_PREFIX.length + 32);
    pkcs8.set(PKCS8_ED25519_PREFIX);
    pkcs8.set(seed, PKCS8_ED25519_PREFIX.length);
    secret.fill(0);
    const keyReady = (async () => {
      const key = await subtle.importKey("pkcs8", pkcs8, { name: "Ed25519" }, true, ["sign"]);
      pkcs8.fill(0);
      const jwk = await subtle.exportKey("jwk", key);
      if (!equalBytes(b64urlDecode(jwk.x), publicKey)) {
        throw new Error("the keypair's public key does not match its seed");
      }
      return key;
    })();
    async function sign(bytes) {
      const key = await keyReady;
      return new Uint8Array(await subtle.sign({ name: "Ed25519" }, key, bytes));
    }

    /** One signing request: approved or rejected as the knobs say, and recorded. */
    function approve(kind, count) {
      const n = control.requests.length + 1;
      const ok = !control.rejectAll && control.rejectRequest !== n;
      control.requests.push({ kind, count, approved: ok, at: Date.now() });
      if (!ok) throw rejected();
    }

    const listeners = { change: new Set() };
    let connected = false;

    class Account {
      get address() { return address; }
      get publicKey() { return publicKey.slice(); }
      get chains() { return CHAINS.slice(); }
      get features() { return ["solana:signTransaction", "solana:signMessage"]; }
      get label() { return NAME; }
      get icon() { return ICON; }
    }
    const account = Object.freeze(new Account());

    function accountFor(input) {
      if (!connected) throw new Error("the test wallet is not connected");
      const a = input && input.account;
      if (!a || a.address !== address) {
        throw new Error(`the test wallet has no account ${a && a.address}`);
      }
      if (input.chain && !CHAINS.includes(input.chain)) {
        throw new Error(`the test wallet does not sign for chain ${input.chain}`);
      }
    }

    function emit(props) {
      for (const listener of listeners.change) {
        try {
          listener(props);
        } catch (e) {
          console.error("a standard:events listener threw", e);
        }
      }
    }

    class TestWallet {
      get version() { return "1.0.0"; }
      get name() { return NAME; }
      get icon() { return ICON; }
      get chains() { return CHAINS.slice(); }
      get accounts() { return connected ? [account] : []; }
      get features() {
        return {
          "standard:connect": {
            version: "1.0.0",
            connect: async (input) => {
              await keyReady;
              if (input && input.silent && !connected) return { accounts: [] };
              if (control.rejectConnect) throw rejected();
              if (!connected) {
                connected = true;
                emit({ accounts: [account] });
              }
              return { accounts: [account] };
            },
          },
          "standard:disconnect": {
            version: "1.0.0",
            disconnect: async () => {
              if (connected) {
                connected = false;
                emit({ accounts: [] });
              }
            },
          },
          "standard:events": {
            version: "1.0.0",
            on: (event, listener) => {
              const set = listeners[event];
              if (!set) return () => {};
              set.add(listener);
              return () => set.delete(listener);
            },
          },
          "solana:signTransaction": {
            version: "1.0.0",
            supportedTransactionVersions: ["legacy", 0],
            signTransaction: async (...inputs) => {
              inputs.forEach(accountFor);
              const slots = inputs.map((i) => signatureSlot(Uint8Array.from(i.transaction), publicKey));
              approve("transaction", inputs.length);
              const out = [];
              for (let k = 0; k < inputs.length; k++) {
                const tx = Uint8Array.from(inputs[k].transaction);
                const sig = await sign(slots[k].message);
                tx.set(sig, slots[k].slot);
                out.push({ signedTransaction: tx });
              }
              return out;
            },
          },
          "solana:signMessage": {
            version: "1.0.0",
            signMessage: async (...inputs) => {
              inputs.forEach(accountFor);
              approve("message", inputs.length);
              const out = [];
              for (const input of inputs) {
                const message = Uint8Array.from(input.message);
                out.push({ signedMessage: message, signature: await sign(message), signatureType: "ed25519" });
              }
              return out;
            },
          },
        };
      }
    }

    const wallet = new TestWallet();
    const ready = keyReady.then(
      () => true,
      (e) => {
        console.error("the gpum test wallet cannot sign:", e && e.message);
        return false;
      },
    );
    Object.defineProperty(control, "ready", { value: ready, enumerable: false });
    Object.defineProperty(window, "gpumTestWallet", { value: control, configurable: false });
    register(wallet);
    return control;
  }

  /** The Wallet Standard's registration: announce now, and answer every app-ready later. */
  function register(wallet) {
    const callback = ({ register: add }) => add(wallet);
    class RegisterWalletEvent extends Event {
      #detail;
      constructor(cb) {
        super("wallet-standard:register-wallet", { bubbles: false, cancelable: false, composed: false });
        this.#detail = cb;
      }
      get detail() { return this.#detail; }
      get type() { return "wallet-standard:register-wallet"; }
      preventDefault() { throw new Error("preventDefault cannot be called"); }
      stopImmediatePropagation() { throw new Error("stopImmediatePropagation cannot be called"); }
      stopPropagation() { throw new Error("stopPropagation cannot be called"); }
    }
    try {
      window.dispatchEvent(new RegisterWalletEvent(callback));
    } catch (e) {
      console.error("wallet-standard:register-wallet could not be dispatched", e);
    }
    window.addEventListener("wallet-standard:app-ready", ({ detail: api }) => callback(api));
  }

  globalThis.gpumInstallTestWallet = install;
})();
