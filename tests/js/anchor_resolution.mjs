// The official stack against gpum-localnet, reading idl/gpu_market.json unmodified, with Anchor's
// account resolution: every instruction gets only the accounts a user chooses
// (`.accounts({...})`); Anchor derives the rest from the IDL (PDAs from `pda` seeds, the market
// and mints from `relations`, programs and sysvars from `address`). Then a failed `has_one`
// comes back as Anchor's named error with the two keys it compared, and web3.js's
// getParsedTransaction shows the System and SPL Token instructions parsed.
//
// Usage: node anchor_resolution.mjs CONFIG.json (written by tests/test_e2e_js_client.py).
// Prints one JSON object: what it did and what it read back.
import { createHash } from "node:crypto";
import fs from "node:fs";
import anchor from "@coral-xyz/anchor";
import {
  Connection,
  Ed25519Program,
  Keypair,
  PublicKey,
  SystemProgram,
  Transaction,
  sendAndConfirmTransaction,
} from "@solana/web3.js";

const { AnchorError, AnchorProvider, BN, Program, Wallet } = anchor;
const cfg = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const idl = JSON.parse(fs.readFileSync(cfg.idl, "utf8"));
const kp = (arr) => Keypair.fromSecretKey(Uint8Array.from(arr));
const pk = (s) => new PublicKey(s);

const connection = new Connection(cfg.rpc, { commitment: "confirmed", wsEndpoint: cfg.ws });
const user = kp(cfg.user);
const worker = kp(cfg.worker);
const validator = kp(cfg.validator);
const program = new Program(idl, new AnchorProvider(connection, new Wallet(user), { commitment: "confirmed" }));
const market = pk(cfg.market);
const provider = pk(cfg.provider);
const userPaymentAccount = pk(cfg.userPayment);
const jobId = new BN(cfg.jobId);
const out = { signatures: {}, resolved: {} };
const send = (tx, signers) => sendAndConfirmTransaction(connection, tx, signers);

// 1. create_job: the user, the provider and the paying token account. Anchor derives the market
// (provider.market), the payment mint (market.payment_mint), the job and escrow PDAs and the
// programs from the IDL.
const marketAccount = await program.account.market.fetch(market);
const now = await connection.getBlockTime(await connection.getSlot());
const due = marketAccount.paramsEffectiveAt.toNumber();
const inForce = due !== 0 && now >= due ? marketAccount.pendingParams : marketAccount.params;
const [validatorPda] = PublicKey.findProgramAddressSync(
  [Buffer.from("validator"), market.toBuffer(), validator.publicKey.toBuffer()],
  program.programId,
);
const create = program.methods
  .createJob(jobId, 1, new BN(cfg.deposit), new BN(cfg.maxPrice), [validator.publicKey], 1, Array(32).fill(0), inForce)
  .accounts({ user: user.publicKey, provider, userPaymentAccount })
  .remainingAccounts([{ pubkey: validatorPda, isSigner: false, isWritable: false }]);
const createAccounts = await create.pubkeys();
out.resolved.create_job = Object.fromEntries(Object.entries(createAccounts).map(([k, v]) => [k, v.toBase58()]));
out.signatures.create_job = await send(await create.transaction(), [user]);
const job = createAccounts.job;
out.job = job.toBase58();

// 2. accept_job: the worker key and the job (the provider comes from job.provider).
out.signatures.accept_job = await send(
  await program.methods.acceptJob().accounts({ signer: worker.publicKey, job }).transaction(),
  [worker],
);
const started = (await program.account.job.fetch(job)).startedAt.toNumber();

// 3. top_up: the job and the paying account (user, market, escrow and mint come from the job).
const topUp = program.methods.topUp(new BN(cfg.topUp)).accounts({ job, userPaymentAccount });
out.resolved.top_up = Object.fromEntries(Object.entries(await topUp.pubkeys()).map(([k, v]) => [k, v.toBase58()]));
out.signatures.top_up = await send(await topUp.transaction(), [user]);

// 4. settle a receipt: the validator's key, the job and the provider's payment account; Anchor
// derives provider, market, the Validator PDA, escrow, fee vault, mint, sysvar and program.
const seconds = cfg.billSeconds;
const windowEnd = started + seconds;
for (;;) {
  const t = await connection.getBlockTime(await connection.getSlot());
  if (t !== null && t >= windowEnd) break;
  await new Promise((r) => setTimeout(r, 250));
}
const proofHash = Buffer.alloc(32, 9);
const u64 = (n) => new BN(n).toArrayLike(Buffer, "le", 8);
const receiptMessage = Buffer.concat([
  Buffer.from("gpu-market/receipt/v1"), program.programId.toBuffer(), market.toBuffer(), job.toBuffer(),
  u64(1), u64(seconds), new BN(windowEnd).toTwos(64).toArrayLike(Buffer, "le", 8), proofHash,
]);
const digest = createHash("sha256").update(receiptMessage).digest();
const settle = program.methods
  .settle({ seq: new BN(1), cumulativeSeconds: new BN(seconds), windowEnd: new BN(windowEnd), proofHash: [...proofHash] },
    new BN(seconds))
  .accounts({ validatorAuthority: validator.publicKey, job, providerPaymentAccount: pk(cfg.providerPayment) });
out.resolved.settle = Object.fromEntries(Object.entries(await settle.pubkeys()).map(([k, v]) => [k, v.toBase58()]));
out.signatures.settle = await send(
  new Transaction().add(
    Ed25519Program.createInstructionWithPrivateKey({ privateKey: worker.secretKey, message: digest }),
    await settle.instruction(),
  ),
  [validator],
);
const settled = await program.account.job.fetch(job);
out.job_account = { paid_seconds: settled.paidSeconds.toNumber(), deposited: settled.deposited.toString() };

// 5. A failed has_one: the user (not the market's authority) proposes an authority. Anchor's
// client turns the transaction's logs into the named error and the two keys it compared.
try {
  await program.methods.proposeAuthority(user.publicKey).accountsPartial({ authority: user.publicKey, market }).rpc();
  out.has_one = { error: "none" };
} catch (e) {
  out.has_one = e instanceof AnchorError
    ? {
      error: "AnchorError", code: e.error.errorCode.code, number: e.error.errorCode.number,
      origin: e.error.origin, compared: (e.error.comparedValues ?? []).map((v) => v.toString()),
    }
    : { error: e.constructor.name, message: String(e.message).slice(0, 300) };
}

// 6. web3.js's parsed transactions: a System transfer, and create_job's inner instructions.
out.signatures.transfer = await send(
  new Transaction().add(SystemProgram.transfer({ fromPubkey: user.publicKey, toPubkey: worker.publicKey, lamports: 12345 })),
  [user],
);
const parsedTransfer = await connection.getParsedTransaction(out.signatures.transfer, { maxSupportedTransactionVersion: 0 });
const ix = parsedTransfer.transaction.message.instructions[0];
out.parsed_transfer = { program: ix.program, type: ix.parsed?.type, info: ix.parsed?.info };
const parsedCreate = await connection.getParsedTransaction(out.signatures.create_job, { maxSupportedTransactionVersion: 0 });
out.parsed_create_inner = parsedCreate.meta.innerInstructions.flatMap((inner) =>
  inner.instructions.map((i) => `${i.program ?? i.programId.toBase58()}:${i.parsed?.type ?? "-"}`));
console.log(JSON.stringify(out));
process.exit(0);
