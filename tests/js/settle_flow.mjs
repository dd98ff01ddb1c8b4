// The official Solana JavaScript stack against gpum-localnet:
// @coral-xyz/anchor 0.32 reads idl/gpu_market.json unmodified; @solana/web3.js 1.x builds the
// Ed25519 instruction (Ed25519Program) and confirms every transaction through
// sendAndConfirmTransaction, which waits on the local chain's PubSub (signatureSubscribe).
//
// Usage: node settle_flow.mjs CONFIG.json  (written by tests/test_e2e_js_client.py: the chain,
// the market and its accounts, and the keypairs of the user, the worker and the validator).
// Prints one JSON object: what it did and what it decoded from the chain and the events.
import { createHash } from "node:crypto";
import fs from "node:fs";
import anchor from "@coral-xyz/anchor";
import {
  Connection,
  Ed25519Program,
  Keypair,
  PublicKey,
  SYSVAR_INSTRUCTIONS_PUBKEY,
  SystemProgram,
  Transaction,
  sendAndConfirmTransaction,
} from "@solana/web3.js";

const { AnchorProvider, BN, BorshCoder, EventParser, Program, Wallet } = anchor;
const cfg = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const idl = JSON.parse(fs.readFileSync(cfg.idl, "utf8"));
const kp = (arr) => Keypair.fromSecretKey(Uint8Array.from(arr));
const pk = (s) => new PublicKey(s);
const TOKEN_PROGRAM = pk("TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA");

const connection = new Connection(cfg.rpc, { commitment: "confirmed", wsEndpoint: cfg.ws });
const user = kp(cfg.user);
const worker = kp(cfg.worker);
const validator = kp(cfg.validator);
const provider = new AnchorProvider(connection, new Wallet(user), { commitment: "confirmed" });
const program = new Program(idl, provider);
if (!program.programId.equals(pk(cfg.programId))) {
  throw new Error(`IDL address ${program.programId} is not the chain's program ${cfg.programId}`);
}
const market = pk(cfg.market);
const providerPda = pk(cfg.provider);
const jobId = new BN(cfg.jobId);
const [job] = PublicKey.findProgramAddressSync(
  [Buffer.from("job"), market.toBuffer(), user.publicKey.toBuffer(), jobId.toArrayLike(Buffer, "le", 8)],
  program.programId,
);
const [escrow] = PublicKey.findProgramAddressSync([Buffer.from("escrow"), job.toBuffer()], program.programId);
const [validatorPda] = PublicKey.findProgramAddressSync(
  [Buffer.from("validator"), market.toBuffer(), validator.publicKey.toBuffer()],
  program.programId,
);
const out = { job: job.toBase58(), signatures: {} };

// 1. create_job (the user), the committee is the one validator, quorum 1, signed for the market
// parameters in force now (the program refuses the job if they change before it lands).
const marketAccount = await program.account.market.fetch(market);
const chainNow = await connection.getBlockTime(await connection.getSlot());
const due = marketAccount.paramsEffectiveAt.toNumber();
const inForce = due !== 0 && chainNow >= due ? marketAccount.pendingParams : marketAccount.params;
const createTx = await program.methods
  .createJob(jobId, 1, new BN(cfg.deposit), new BN(cfg.maxPrice), [validator.publicKey], 1, Array(32).fill(0), inForce)
  .accountsStrict({
    user: user.publicKey, market, provider: providerPda, job, escrow, paymentMint: pk(cfg.paymentMint),
    userPaymentAccount: pk(cfg.userPayment), tokenProgram: TOKEN_PROGRAM, systemProgram: SystemProgram.programId,
  })
  .remainingAccounts([{ pubkey: validatorPda, isSigner: false, isWritable: false }])
  .transaction();
out.signatures.create_job = await sendAndConfirmTransaction(connection, createTx, [user]);

// 2. accept_job (the provider's worker key).
const acceptTx = await program.methods.acceptJob()
  .accountsStrict({ signer: worker.publicKey, provider: providerPda, job })
  .transaction();
out.signatures.accept_job = await sendAndConfirmTransaction(connection, acceptTx, [worker]);
const started = await program.account.job.fetch(job);
out.started_at = started.startedAt.toNumber();

// 3. settle a receipt the worker signs (its digest), through web3.js's Ed25519Program.
const seconds = cfg.billSeconds;
const windowEnd = out.started_at + seconds;
// Wait until the chain's clock passed the window end (settle refuses receipts from the future).
for (;;) {
  const slot = await connection.getSlot();
  const t = await connection.getBlockTime(slot);
  if (t !== null && t >= windowEnd) break;
  await new Promise((r) => setTimeout(r, 250));
}
const proofHash = Buffer.alloc(32, 7);
const u64 = (n) => new BN(n).toArrayLike(Buffer, "le", 8);
const i64 = (n) => new BN(n).toTwos(64).toArrayLike(Buffer, "le", 8);
const receiptMessage = Buffer.concat([
  Buffer.from("gpu-market/receipt/v1"), program.programId.toBuffer(), market.toBuffer(), job.toBuffer(),
  u64(1), u64(seconds), i64(windowEnd), proofHash,
]);
// The worker signs the receipt digest, sha256 of the receipt message.
const receiptDigest = createHash("sha256").update(receiptMessage).digest();
const ed25519Ix = Ed25519Program.createInstructionWithPrivateKey({ privateKey: worker.secretKey, message: receiptDigest });
const settleIx = await program.methods
  .settle({ seq: new BN(1), cumulativeSeconds: new BN(seconds), windowEnd: new BN(windowEnd), proofHash: [...proofHash] },
    new BN(seconds))
  .accountsStrict({
    validatorAuthority: validator.publicKey, market, validator: validatorPda, provider: providerPda, job, escrow,
    providerPaymentAccount: pk(cfg.providerPayment), feeVault: pk(cfg.feeVault), paymentMint: pk(cfg.paymentMint),
    instructions: SYSVAR_INSTRUCTIONS_PUBKEY, tokenProgram: TOKEN_PROGRAM,
  })
  .instruction();
out.signatures.settle = await sendAndConfirmTransaction(connection, new Transaction().add(ed25519Ix, settleIx), [validator]);

// 4. decode the accounts and the events with the IDL.
const j = await program.account.job.fetch(job);
out.job_account = {
  status: Object.keys(j.status)[0], paid_seconds: j.paidSeconds.toNumber(), claimed_seconds: j.claimedSeconds.toNumber(),
  last_seq: j.lastSeq.toNumber(), paid_provider: j.paidProvider.toString(), deposited: j.deposited.toString(),
  committee_len: j.committeeLen, workload_hash: Buffer.from(j.workloadHash).toString("hex"),
};
const m = await program.account.market.fetch(market);
out.market_account = { fees: m.totals.fees.toString(), burned: m.totals.burned.toString() };
const parser = new EventParser(program.programId, new BorshCoder(idl));
out.events = {};
for (const [name, sig] of Object.entries(out.signatures)) {
  const tx = await connection.getTransaction(sig, { commitment: "confirmed", maxSupportedTransactionVersion: 0 });
  out.events[name] = [...parser.parseLogs(tx.meta.logMessages)].map((e) => ({
    name: e.name,
    data: Object.fromEntries(Object.entries(e.data).map(([k, v]) => [k, v?.toString?.() ?? v])),
  }));
}
console.log(JSON.stringify(out));
// The Connection keeps its PubSub socket open; the work is done.
process.exit(0);
