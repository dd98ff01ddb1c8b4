/**
 * The browser wallet, through the Wallet Standard only: wallets that register themselves
 * (`getWallets()`, both the `register-wallet` and `app-ready` events) and offer
 * `standard:connect`, `solana:signTransaction` and `solana:signMessage` on the node's chain
 * (or `solana:localnet`). Every signature is the wallet's; the page never sees a key.
 *
 * A request the user refuses rejects with an error whose `code` is 4001 or whose message says
 * "rejected" (`isRejection`); callers say what was rejected and that nothing was sent.
 */
import { getWallets } from "@wallet-standard/app";
import type { IdentifierString, Wallet, WalletAccount } from "@wallet-standard/base";

type ConnectFeature = {
  connect(input?: { silent?: boolean }): Promise<{ accounts: readonly WalletAccount[] }>;
};
type SignTransactionFeature = {
  supportedTransactionVersions?: readonly (string | number)[];
  signTransaction(...inputs: {
    account: WalletAccount;
    transaction: Uint8Array;
    chain?: IdentifierString;
  }[]): Promise<readonly { signedTransaction: Uint8Array }[]>;
};
type SignMessageFeature = {
  signMessage(...inputs: { account: WalletAccount; message: Uint8Array }[]): Promise<
    readonly { signedMessage: Uint8Array; signature: Uint8Array }[]
  >;
};

const NEEDED = ["standard:connect", "solana:signTransaction", "solana:signMessage"] as const;

/** Whether `wallet` can rent here: the three features and one of `chains`. */
export function usable(wallet: Wallet, chains: readonly string[]): boolean {
  return NEEDED.every((f) => f in wallet.features) && wallet.chains.some((c) => chains.includes(c));
}

/** The usable wallets now, and `onChange` called whenever one registers or goes. */
export function watchWallets(chains: readonly string[], onChange: (wallets: Wallet[]) => void): () => Wallet[] {
  const api = getWallets();
  const list = (): Wallet[] => api.get().filter((w) => usable(w, chains));
  api.on("register", () => onChange(list()));
  api.on("unregister", () => onChange(list()));
  return list;
}

/** A user's refusal in the wallet (EIP-1193 code 4001, or a message saying so). */
export function isRejection(e: unknown): boolean {
  const err = e as { code?: unknown; message?: unknown } | null;
  if (!err) return false;
  if (err.code === 4001) return true;
  return typeof err.message === "string" && /reject|denied|declined|cancel+ed by (the )?user/i.test(err.message);
}

/** A connected account of a wallet, and its signing calls on `chain`. */
export class Connected {
  constructor(
    readonly wallet: Wallet,
    readonly account: WalletAccount,
    readonly chain: IdentifierString,
  ) {}

  get address(): string {
    return this.account.address;
  }

  /** Connects `wallet` and keeps its first account on `chain`. */
  static async connect(wallet: Wallet, chain: IdentifierString): Promise<Connected> {
    const { accounts } = await (wallet.features["standard:connect"] as ConnectFeature).connect();
    const account = accounts.find((a) => a.chains.includes(chain)) ?? accounts[0];
    if (!account) throw new Error(`${wallet.name} gave no account; unlock it and connect again`);
    return new Connected(wallet, account, chain);
  }

  /** The wallet's signature on a wire transaction (the page sends it). */
  async signTransaction(wire: Uint8Array): Promise<Uint8Array> {
    const f = this.wallet.features["solana:signTransaction"] as SignTransactionFeature;
    const [out] = await f.signTransaction({ account: this.account, transaction: wire, chain: this.chain });
    if (!out) throw new Error(`${this.wallet.name} returned no signed transaction`);
    return out.signedTransaction;
  }

  /** The wallet's Ed25519 signature of `message` (raw bytes). */
  async signMessage(message: Uint8Array): Promise<Uint8Array> {
    const f = this.wallet.features["solana:signMessage"] as SignMessageFeature;
    const [out] = await f.signMessage({ account: this.account, message });
    if (!out || out.signature.length !== 64) throw new Error(`${this.wallet.name} returned no signature`);
    return out.signature;
  }
}
