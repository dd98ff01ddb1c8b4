// The generated TypeScript client (clients/js, Codama + @solana/kit) against gpum-localnet: a
// user creates a job with a workload (its hash from the client's canonical spec and a secret
// sealed to the worker key) and a committee of two with quorum 2, confirmed over PubSub with
// kit; the worker accepts it; one member settles a receipt with the other's attestation in
// one multi-entry Ed25519 instruction built by the client; a create_job above the user's price
// limit fails with the error the generated client names; kit reads jsonParsed answers.
//
// Usage: node client_flow.cjs CONFIG.json (written by tests/test_e2e_js_client.py; needs
// clients/js built: `make js-client`). Prints one JSON object.
const fs = require("node:fs");
const path = require("node:path");
const kit = require("@solana/kit");
const gpum = require(path.resolve(__dirname, "../../clients/js"));

async function main() {
  const cfg = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
  const rpc = kit.createSolanaRpc(cfg.rpc);
  const rpcSubscriptions = kit.createSolanaRpcSubscriptions(cfg.ws);
  const sendAndConfirm = kit.sendAndConfirmTransactionFactory({ rpc, rpcSubscriptions });
  const signer = (bytes) => kit.createKeyPairSignerFromBytes(Uint8Array.from(bytes));
  const user = await signer(cfg.user);
  const worker = await signer(cfg.worker);
  const member = await signer(cfg.validator);
  const attester = await signer(cfg.validator2);
  const market = kit.address(cfg.market);
  const provider = kit.address(cfg.provider);
  const out = {};

  const build = async (instructions, payer = user) => {
    const { value: blockhash } = await rpc.getLatestBlockhash().send();
    return kit.pipe(
      kit.createTransactionMessage({ version: 0 }),
      (m) => kit.setTransactionMessageFeePayerSigner(payer, m),
      (m) => kit.setTransactionMessageLifetimeUsingBlockhash(blockhash, m),
      (m) => kit.appendTransactionMessageInstructions(instructions, m),
    );
  };

  // The README's few lines: the market's mint and the parameters in force, the workload hash,
  // the instruction (job and escrow PDAs and programs filled in), the committee.
  const { data: m } = await gpum.fetchMarket(rpc, market);
  const now = BigInt(await rpc.getBlockTime(await rpc.getSlot().send()).send());
  const expectedParams = m.paramsEffectiveAt !== 0n && now >= m.paramsEffectiveAt ? m.pendingParams : m.params;
  const secretEnv = await gpum.sealSecrets(kit.address(cfg.workerKey), { HF_TOKEN: "hf_secret" });
  const spec = { image: "docker.io/library/python:3.12", command: ["python"], args: ["-c", "print(1)"], secretEnv };
  const workloadHash = await gpum.specHash(spec);
  const createJob = async (jobId, maxPricePerGpuSecond) =>
    gpum.withRemainingAccounts(
      await gpum.getCreateJobInstructionAsync({
        user, market, provider, paymentMint: m.paymentMint, userPaymentAccount: kit.address(cfg.userPayment),
        jobId, gpuCount: 1, deposit: BigInt(cfg.deposit), maxPricePerGpuSecond,
        committee: [member.address, attester.address], quorum: 2, workloadHash, expectedParams,
      }),
      await gpum.committeeAccounts(market, [member.address, attester.address]),
    );

  const tx = await kit.signTransactionMessageWithSigners(await build([await createJob(BigInt(cfg.jobId), BigInt(cfg.maxPrice))]));
  await sendAndConfirm(tx, { commitment: "confirmed" });
  out.signature = kit.getSignatureFromTransaction(tx);
  const [job] = await gpum.findJobPda({ market, user: user.address, jobId: BigInt(cfg.jobId) });
  const { data: j } = await gpum.fetchJob(rpc, job);
  out.job = job;
  out.job_account = {
    status: gpum.JobStatus[j.status], deposited: j.deposited.toString(), committee_len: j.committeeLen,
    workload_hash: Buffer.from(j.workloadHash).toString("hex"), user: j.user, provider: j.provider,
  };
  out.spec_json = gpum.specToJson(spec);

  // The worker accepts; a committee member settles the first window with the other's
  // attestation: worker receipt signature and attestation in one Ed25519 instruction.
  const accept = await gpum.getAcceptJobInstruction({ signer: worker, provider, job });
  await sendAndConfirm(await kit.signTransactionMessageWithSigners(await build([accept], worker)), { commitment: "confirmed" });
  const startedAt = (await gpum.fetchJob(rpc, job)).data.startedAt;
  const windowEnd = startedAt + BigInt(cfg.billSeconds);
  while (BigInt(await rpc.getBlockTime(await rpc.getSlot().send()).send()) < windowEnd) {
    await new Promise((r) => setTimeout(r, 250));
  }
  const receipt = { seq: 1n, cumulativeSeconds: BigInt(cfg.billSeconds), windowEnd, proofHash: new Uint8Array(32).fill(5) };
  const receiptMessage = gpum.receiptMessage({ programAddress: gpum.GPU_MARKET_PROGRAM_ADDRESS, market, job, ...receipt });
  const attestationMessage = await gpum.attestationMessage(receiptMessage, receipt.cumulativeSeconds);
  const ed25519 = gpum.ed25519SettleInstruction({
    workerKey: worker.address,
    receiptSignature: await kit.signBytes(worker.keyPair.privateKey, await gpum.receiptDigest(receiptMessage)),
    attestations: [{ authority: attester.address, signature: await kit.signBytes(attester.keyPair.privateKey, attestationMessage) }],
    attestationMessage,
  });
  const settle = gpum.withRemainingAccounts(
    await gpum.getSettleInstructionAsync({
      validatorAuthority: member, market, provider, job, paymentMint: m.paymentMint,
      providerPaymentAccount: kit.address(cfg.providerPayment), receipt, approvedSeconds: receipt.cumulativeSeconds,
    }),
    await gpum.attesterAccounts(market, [attester.address]),
  );
  const settleTx = await kit.signTransactionMessageWithSigners(await build([ed25519, settle], member));
  await sendAndConfirm(settleTx, { commitment: "confirmed" });
  out.settle_signature = kit.getSignatureFromTransaction(settleTx);
  out.ed25519_entries = gpum.parseEd25519Signatures(ed25519.data).map((e) => e.message.length);
  const { data: settled } = await gpum.fetchJob(rpc, job);
  out.settled = { paid_seconds: settled.paidSeconds.toString(), last_seq: settled.lastSeq.toString() };

  // A price limit below the provider's price: the program's PriceAboveLimit, by name.
  const message = await build([await createJob(BigInt(cfg.jobId) + 1n, BigInt(cfg.maxPrice) - 1n)]);
  try {
    await sendAndConfirm(await kit.signTransactionMessageWithSigners(message), { commitment: "confirmed" });
    out.price_error = "none";
  } catch (e) {
    const cause = e.cause ?? e;
    out.price_error = {
      is_price_above_limit: gpum.isGpuMarketError(cause, message, gpum.GPU_MARKET_ERROR__PRICE_ABOVE_LIMIT),
      code: cause.context?.code, message: gpum.getGpuMarketErrorMessage(gpum.GPU_MARKET_ERROR__PRICE_ABOVE_LIMIT),
    };
  }

  // kit's jsonParsed reads: create_job's inner instructions and the user's token account.
  const parsed = await rpc
    .getTransaction(out.signature, { encoding: "jsonParsed", maxSupportedTransactionVersion: 0, commitment: "confirmed" })
    .send();
  out.parsed_inner = parsed.meta.innerInstructions.flatMap((inner) =>
    inner.instructions.map((i) => `${i.program ?? i.programId}:${i.parsed?.type ?? "-"}`));
  const { value: account } = await rpc
    .getAccountInfo(kit.address(cfg.userPayment), { encoding: "jsonParsed", commitment: "confirmed" })
    .send();
  out.parsed_account = { program: account.data.program, type: account.data.parsed?.type, owner: account.data.parsed?.info?.owner };
  console.log(JSON.stringify(out, (_, v) => (typeof v === "bigint" ? v.toString() : v)));
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
