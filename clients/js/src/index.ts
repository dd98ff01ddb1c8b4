/**
 * gpu-market's TypeScript client on @solana/kit.
 *
 * - `./generated` (Codama, from idl/gpu_market.json; never edited by hand): instruction
 *   builders (`getCreateJobInstructionAsync` fills in every PDA and program address the IDL
 *   derives), account decoders and fetchers (`fetchJob`, `fetchMarket`, ...), PDA helpers
 *   (`findJobPda`, ...), the program's error codes and messages.
 * - What the IDL cannot say: the Ed25519-program instructions `settle`, `attest_hardware` and
 *   the slashes read (`./ed25519`), the workload spec with its sealed secrets (`./workload`), and
 *   the remaining accounts below.
 */
import { AccountRole, type AccountMeta, type Address, type Instruction } from "@solana/kit";
import { findValidatorPda } from "./generated";

export * from "./generated";
export * from "./ed25519";
export * from "./workload";

/**
 * `create_job`'s remaining accounts: the committee members' Validator PDAs (read-only), in the
 * order of its `committee` argument.
 */
export async function committeeAccounts(market: Address, committee: readonly Address[]): Promise<AccountMeta[]> {
  return Promise.all(
    committee.map(async (authority) => ({
      address: (await findValidatorPda({ market, authority }))[0],
      role: AccountRole.READONLY,
    })),
  );
}

/**
 * `settle`'s remaining accounts: the Validator PDAs of the committee members whose attestations
 * follow the worker's signature in the Ed25519 instruction (writable: they earn rewards), same order.
 */
export async function attesterAccounts(market: Address, attesters: readonly Address[]): Promise<AccountMeta[]> {
  return Promise.all(
    attesters.map(async (authority) => ({
      address: (await findValidatorPda({ market, authority }))[0],
      role: AccountRole.WRITABLE,
    })),
  );
}

/** `instruction` with `accounts` appended (the IDL has no remaining accounts). */
export function withRemainingAccounts<T extends Instruction>(instruction: T, accounts: readonly AccountMeta[]): T {
  return Object.freeze({ ...instruction, accounts: [...(instruction.accounts ?? []), ...accounts] });
}
