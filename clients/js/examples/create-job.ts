/**
 * Creating a job with a container from TypeScript: the generated builder fills in the job and
 * escrow PDAs and the programs; the committee's Validator accounts follow as remaining accounts.
 * Compiled (not run) by `make js-client`, so this stays the README's working snippet.
 */
import {
  type Address,
  type KeyPairSigner,
  appendTransactionMessageInstructions,
  assertIsTransactionWithBlockhashLifetime,
  createSolanaRpc,
  createSolanaRpcSubscriptions,
  createTransactionMessage,
  pipe,
  sendAndConfirmTransactionFactory,
  setTransactionMessageFeePayerSigner,
  setTransactionMessageLifetimeUsingBlockhash,
  signTransactionMessageWithSigners,
} from "@solana/kit";
import {
  committeeAccounts,
  fetchMarket,
  fetchProvider,
  findJobPda,
  getCreateJobInstructionAsync,
  specHash,
  withRemainingAccounts,
} from "@gpu-market/client";

export async function createJob(user: KeyPairSigner, market: Address, provider: Address,
  userPaymentAccount: Address, committee: Address[]): Promise<Address> {
  const rpc = createSolanaRpc("http://127.0.0.1:8899");
  const rpcSubscriptions = createSolanaRpcSubscriptions("ws://127.0.0.1:8900");
  const { data: m } = await fetchMarket(rpc, market);
  const { data: p } = await fetchProvider(rpc, provider);
  const workloadHash = await specHash({ image: "docker.io/library/python:3.12",
    command: ["python", "-m", "http.server", "8000"], ports: [{ port: 8000 }] });
  const jobId = BigInt(Date.now());
  const createJob = withRemainingAccounts(await getCreateJobInstructionAsync({
    user, market, provider, paymentMint: m.paymentMint, userPaymentAccount, jobId, gpuCount: 1,
    deposit: p.pricePerGpuSecond * 3600n /* one GPU-hour */, maxPricePerGpuSecond: p.pricePerGpuSecond,
    committee, quorum: 1, workloadHash, expectedParams: m.params,
  }), await committeeAccounts(market, committee));
  const { value: blockhash } = await rpc.getLatestBlockhash().send();
  const tx = await signTransactionMessageWithSigners(pipe(
    createTransactionMessage({ version: 0 }),
    (t) => setTransactionMessageFeePayerSigner(user, t),
    (t) => setTransactionMessageLifetimeUsingBlockhash(blockhash, t),
    (t) => appendTransactionMessageInstructions([createJob], t),
  ));
  assertIsTransactionWithBlockhashLifetime(tx);
  await sendAndConfirmTransactionFactory({ rpc, rpcSubscriptions })(tx, { commitment: "confirmed" });
  return (await findJobPda({ market, user: user.address, jobId }))[0];
}
