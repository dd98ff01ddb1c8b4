// Computes, with the built client (dist), what tests/test_js_client_vectors.py computes with the
// Python SDK, from the same inputs: the three Ed25519 layouts, the receipt and attestation
// messages, workload canonical bytes and hashes, worker API request messages, and sealed
// secrets both ways. Usage: node test/vectors.cjs INPUT.json  (prints one JSON object).
const fs = require("node:fs");
const path = require("node:path");
const gpum = require(path.resolve(__dirname, ".."));

const hex = (b) => Buffer.from(b).toString("hex");
const bytes = (h) => Uint8Array.from(Buffer.from(h, "hex"));

async function main() {
  const input = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
  const out = {};
  const s = input.settle;
  out.settle = hex(gpum.ed25519SettleInstruction({
    workerKey: s.workerKey, receiptSignature: bytes(s.receiptSignature),
    attestations: s.attestations.map((a) => ({ authority: a.authority, signature: bytes(a.signature) })),
    attestationMessage: bytes(s.attestationMessage),
  }).data);
  out.multi = hex(gpum.ed25519MultiInstruction(
    input.multi.signatures.map((x) => ({ publicKey: x.publicKey, signature: bytes(x.signature) })),
    bytes(input.multi.message),
  ).data);
  out.entries = hex(gpum.ed25519EntriesInstruction(
    input.entries.map((e) => ({ publicKey: e.publicKey, signature: bytes(e.signature), message: bytes(e.message) })),
  ).data);
  out.parsed_entries = gpum.parseEd25519Signatures(bytes(input.parse)).map((e) => [hex(e.publicKey), hex(e.signature), hex(e.message)]);
  const r = input.receipt;
  const message = gpum.receiptMessage({
    programAddress: r.programAddress, market: r.market, job: r.job, seq: BigInt(r.seq),
    cumulativeSeconds: BigInt(r.cumulativeSeconds), windowEnd: BigInt(r.windowEnd), proofHash: bytes(r.proofHash),
  });
  out.receipt_message = hex(message);
  out.receipt_digest = hex(await gpum.receiptDigest(message));
  out.attestation_message = hex(await gpum.attestationMessage(message, BigInt(r.approvedSeconds)));
  out.specs = [];
  for (const spec of input.specs) {
    out.specs.push({ canonical: Buffer.from(gpum.canonicalBytes(spec)).toString("utf8"), hash: hex(await gpum.specHash(spec)) });
  }
  out.rejected = input.invalid_specs.map((spec) => {
    try {
      gpum.validateSpec(spec);
      return "accepted";
    } catch (e) {
      return e instanceof gpum.WorkloadSpecError ? "WorkloadSpecError" : `${e.name}: ${e.message}`;
    }
  });
  out.requests = input.requests.map((q) => hex(gpum.requestMessage(q.action, q.job, bytes(q.workloadHash), BigInt(q.timestamp))));
  out.opened = Buffer.from(await gpum.openSecret(bytes(input.worker_seed), Buffer.from(input.sealed_by_python, "base64"))).toString("utf8");
  out.sealed_by_js = await gpum.sealSecrets(input.worker_key, { FROM_JS: "sealed in TypeScript ✓" });
  console.log(JSON.stringify(out));
}

main().then(() => process.exit(0), (e) => { console.error(e); process.exit(1); });
