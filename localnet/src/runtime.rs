//! The native runtime harness: `gpu_market`, compiled for the host, runs as a builtin inside the
//! real Solana runtime (LiteSVM, Agave 3.1), next to SPL Token/ATA/Memo as real SBF programs and
//! the Ed25519 precompile.
//!
//! A natively compiled program reaches the runtime through `solana_sysvar::program_stubs`, the
//! host side of every syscall (CPI, sysvars, logs, return data). [`NativeStubs`] implements it
//! against the `InvokeContext` of the instruction being executed, which the builtin entrypoint
//! publishes in a thread-local for the duration of the call. `msg!` reaches the log collector
//! through the hook of our patched `solana-msg`, and so does `Pubkey::log` (our patched
//! `solana-address` writes through it: the keys of a failed `has_one`); events through
//! `sol_log_data`. Nothing the program logs goes to stdout.
//!
//! Differences from a cluster (documented in the README): the program's own compute units are
//! not metered (a native builtin has no instruction counter; CPIs into SBF programs are), and
//! a panic in the program becomes `ProgramFailedToComplete` instead of an SBF abort.
use std::{
    cell::{Cell, RefCell},
    collections::{HashMap, HashSet},
    mem::transmute,
    panic::AssertUnwindSafe,
    sync::Once,
};

use litesvm::LiteSVM;
use solana_account_info::AccountInfo;
use solana_instruction::{error::InstructionError, error::UNSUPPORTED_SYSVAR, Instruction};
use solana_program_entrypoint::{deserialize, SUCCESS};
use solana_program_error::{ProgramError, ProgramResult};
use solana_program_runtime::{
    declare_process_instruction, invoke_context::InvokeContext, serialization::serialize_parameters,
    stable_log,
};
use solana_pubkey::Pubkey;
use solana_sbpf::vm::ContextObject;
use solana_svm_timings::ExecuteTimings;
use solana_sysvar::SysvarSerialize;
use solana_transaction_context::IndexOfAccount;

/// The program id the native program is hosted under.
pub const PROGRAM_ID: Pubkey = gpu_market::ID;

thread_local! {
    /// The `InvokeContext` of the native instruction running on this thread (0 = none).
    static INVOKE_CONTEXT: Cell<usize> = const { Cell::new(0) };
    /// The first error of a failed CPI. On a cluster a failed CPI aborts the transaction with the
    /// callee's error, whatever the caller does next; the builtin reports this error instead of
    /// whatever the program returned afterwards.
    static CPI_FAILURE: RefCell<Option<InstructionError>> = const { RefCell::new(None) };
}

/// Records a CPI failure and turns it into the `ProgramError` the program sees.
fn cpi_error(err: InstructionError) -> ProgramError {
    CPI_FAILURE.with(|f| {
        let mut f = f.borrow_mut();
        if f.is_none() {
            *f = Some(err.clone());
        }
    });
    ProgramError::try_from(err).unwrap_or(ProgramError::Custom(u32::MAX))
}

/// Publishes `ctx` for the syscall stubs while alive; restores the previous one on drop, so
/// nested native invocations (a CPI back into the program) unwind correctly.
struct ContextGuard(usize);

impl ContextGuard {
    fn enter(ctx: &mut InvokeContext) -> Self {
        let ptr = ctx as *mut InvokeContext as usize;
        Self(INVOKE_CONTEXT.with(|c| c.replace(ptr)))
    }
}

impl Drop for ContextGuard {
    fn drop(&mut self) {
        INVOKE_CONTEXT.with(|c| c.set(self.0));
    }
}

fn with_context<R>(f: impl FnOnce(&mut InvokeContext<'static, 'static>) -> R) -> Option<R> {
    let ptr = INVOKE_CONTEXT.with(|c| c.get()) as *mut InvokeContext<'static, 'static>;
    // SAFETY: set by `ContextGuard` from a live `&mut InvokeContext` for the duration of the
    // native call on this thread; the stubs only run inside that call.
    unsafe { ptr.as_mut() }.map(f)
}

fn context() -> &'static mut InvokeContext<'static, 'static> {
    let ptr = INVOKE_CONTEXT.with(|c| c.get()) as *mut InvokeContext<'static, 'static>;
    // SAFETY: see `with_context`.
    unsafe { ptr.as_mut() }.expect("a syscall stub ran outside a native instruction")
}

declare_process_instruction!(GpuMarketBuiltin, 1, |invoke_context| {
    run_native(invoke_context)
});

/// Runs `gpu_market::entry` on the current instruction: the accounts are serialized exactly as
/// for an SBF program, handed to the program as `AccountInfo`s, and written back afterwards.
fn run_native(invoke_context: &mut InvokeContext) -> Result<(), InstructionError> {
    let _guard = ContextGuard::enter(invoke_context);
    CPI_FAILURE.with(|f| f.borrow_mut().take());
    let instruction_context = invoke_context
        .transaction_context
        .get_current_instruction_context()?;
    let indices: HashSet<IndexOfAccount> =
        (0..instruction_context.get_number_of_instruction_accounts()).collect();
    let mask_rent_epoch = invoke_context
        .get_feature_set()
        .mask_out_rent_epoch_in_vm_serialization;
    let (mut parameters, _regions, _lengths, _data_offset) =
        serialize_parameters(&instruction_context, false, false, mask_rent_epoch)?;
    // SAFETY: `parameters` is the canonical input serialization and outlives `account_infos`.
    let (program_id, account_infos, input) =
        unsafe { deserialize(parameters.as_slice_mut().as_mut_ptr()) };

    let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| {
        // Anchor's `entry` ties the slice lifetime to the accounts' lifetime.
        let accounts: &[AccountInfo] = unsafe { transmute(account_infos.as_slice()) };
        gpu_market::entry(program_id, accounts, input)
    }));
    if let Some(err) = CPI_FAILURE.with(|f| f.borrow_mut().take()) {
        return Err(err);
    }
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(err)) => return Err(InstructionError::from(u64::from(err))),
        Err(_) => return Err(InstructionError::ProgramFailedToComplete),
    }

    let by_key: HashMap<&Pubkey, &AccountInfo> =
        account_infos.iter().map(|a| (a.key, a)).collect();
    let instruction_context = invoke_context
        .transaction_context
        .get_current_instruction_context()?;
    for index in indices {
        let mut account = instruction_context.try_borrow_instruction_account(index)?;
        if !account.is_writable() {
            continue;
        }
        let Some(info) = by_key.get(account.get_key()) else {
            continue;
        };
        if account.get_lamports() != info.lamports() {
            account.set_lamports(info.lamports())?;
        }
        let data = info.try_borrow_data().map_err(|_| InstructionError::AccountBorrowFailed)?;
        if account.get_data() != &data[..] {
            account.set_data_from_slice(&data)?;
        }
        if account.get_owner() != info.owner {
            account.set_owner(info.owner.as_ref())?;
        }
    }
    Ok(())
}

fn read_sysvar<T: Clone + SysvarSerialize>(
    sysvar: Result<std::sync::Arc<T>, InstructionError>,
    var_addr: *mut u8,
) -> u64 {
    match sysvar {
        Ok(value) => {
            // SAFETY: the caller passes a pointer to a `T` (the stub contract).
            unsafe { *(var_addr as *mut T) = T::clone(&value) };
            SUCCESS
        }
        Err(_) => UNSUPPORTED_SYSVAR,
    }
}

/// Host implementations of the syscalls, against the running instruction's `InvokeContext`.
struct NativeStubs;

impl solana_sysvar::program_stubs::SyscallStubs for NativeStubs {
    fn sol_log(&self, message: &str) {
        log_message(message);
    }

    fn sol_log_compute_units(&self) {
        with_context(|ctx| {
            let remaining = ctx.get_remaining();
            stable_log::program_log(&ctx.get_log_collector(), &format!("consumption: {remaining} units remaining"));
        });
    }

    fn sol_remaining_compute_units(&self) -> u64 {
        with_context(|ctx| ctx.get_remaining()).unwrap_or(0)
    }

    fn sol_invoke_signed(
        &self,
        instruction: &Instruction,
        account_infos: &[AccountInfo],
        signers_seeds: &[&[&[u8]]],
    ) -> ProgramResult {
        invoke_signed(context(), instruction, account_infos, signers_seeds)
    }

    fn sol_get_clock_sysvar(&self, var_addr: *mut u8) -> u64 {
        read_sysvar(context().get_sysvar_cache().get_clock(), var_addr)
    }

    fn sol_get_epoch_schedule_sysvar(&self, var_addr: *mut u8) -> u64 {
        read_sysvar(context().get_sysvar_cache().get_epoch_schedule(), var_addr)
    }

    fn sol_get_rent_sysvar(&self, var_addr: *mut u8) -> u64 {
        read_sysvar(context().get_sysvar_cache().get_rent(), var_addr)
    }

    fn sol_get_epoch_rewards_sysvar(&self, var_addr: *mut u8) -> u64 {
        read_sysvar(context().get_sysvar_cache().get_epoch_rewards(), var_addr)
    }

    fn sol_get_last_restart_slot(&self, var_addr: *mut u8) -> u64 {
        read_sysvar(context().get_sysvar_cache().get_last_restart_slot(), var_addr)
    }

    fn sol_get_return_data(&self) -> Option<(Pubkey, Vec<u8>)> {
        let (program_id, data) = context().transaction_context.get_return_data();
        Some((*program_id, data.to_vec()))
    }

    fn sol_set_return_data(&self, data: &[u8]) {
        let ctx = context();
        let caller = ctx
            .transaction_context
            .get_current_instruction_context()
            .and_then(|ic| ic.get_program_key().copied());
        if let Ok(caller) = caller {
            let _ = ctx.transaction_context.set_return_data(caller, data.to_vec());
        }
    }

    fn sol_log_data(&self, fields: &[&[u8]]) {
        with_context(|ctx| stable_log::program_data(&ctx.get_log_collector(), fields));
    }

    fn sol_get_stack_height(&self) -> u64 {
        context().get_stack_height() as u64
    }
}

fn log_message(message: &str) {
    if with_context(|ctx| stable_log::program_log(&ctx.get_log_collector(), message)).is_none() {
        println!("{message}");
    }
}

/// A CPI from the native program: sync the caller's `AccountInfo`s into the transaction,
/// run the callee through the runtime (which logs its invoke/success lines and meters it), then
/// copy the writable accounts back into the caller's `AccountInfo`s.
fn invoke_signed(
    ctx: &mut InvokeContext<'static, 'static>,
    instruction: &Instruction,
    account_infos: &[AccountInfo],
    signers_seeds: &[&[&[u8]]],
) -> ProgramResult {
    let caller = *ctx
        .transaction_context
        .get_current_instruction_context()
        .map_err(cpi_error)?
        .get_program_key()
        .map_err(cpi_error)?;
    let signers = signers_seeds
        .iter()
        .map(|seeds| Pubkey::create_program_address(seeds, &caller))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| ProgramError::InvalidSeeds)?;
    ctx.prepare_next_instruction(instruction.clone(), &signers)
        .map_err(cpi_error)?;

    let mut writable = Vec::new();
    {
        let tc = &ctx.transaction_context;
        let caller_ic = tc
            .get_current_instruction_context()
            .map_err(cpi_error)?;
        let callee_ic = tc
            .get_next_instruction_context()
            .map_err(cpi_error)?;
        for ia in callee_ic.instruction_accounts().iter() {
            let key = tc
                .get_key_of_account_at_index(ia.index_in_transaction)
                .map_err(cpi_error)?;
            let info_index = account_infos
                .iter()
                .position(|info| info.key == key)
                .ok_or(ProgramError::NotEnoughAccountKeys)?;
            let info = &account_infos[info_index];
            let index_in_caller = caller_ic
                .get_index_of_account_in_instruction(ia.index_in_transaction)
                .map_err(cpi_error)?;
            let mut account = caller_ic
                .try_borrow_instruction_account(index_in_caller)
                .map_err(cpi_error)?;
            if account.get_lamports() != info.lamports() {
                account
                    .set_lamports(info.lamports())
                    .map_err(cpi_error)?;
            }
            let data = info.try_borrow_data()?;
            if account.get_data() != &data[..] {
                account
                    .set_data_from_slice(&data)
                    .map_err(cpi_error)?;
            }
            if account.get_owner() != info.owner {
                account
                    .set_owner(info.owner.as_ref())
                    .map_err(cpi_error)?;
            }
            if ia.is_writable() {
                writable.push((ia.index_in_transaction, info_index));
            }
        }
    }

    let mut units = 0;
    ctx.process_instruction(&mut units, &mut ExecuteTimings::default())
        .map_err(cpi_error)?;

    let tc = &ctx.transaction_context;
    let caller_ic = tc
        .get_current_instruction_context()
        .map_err(cpi_error)?;
    for (index_in_transaction, info_index) in writable {
        let index_in_caller = caller_ic
            .get_index_of_account_in_instruction(index_in_transaction)
            .map_err(cpi_error)?;
        let account = caller_ic
            .try_borrow_instruction_account(index_in_caller)
            .map_err(cpi_error)?;
        let info = &account_infos[info_index];
        **info.try_borrow_mut_lamports()? = account.get_lamports();
        if info.owner != account.get_owner() {
            // SAFETY: the same owner write-back solana-program-test performs; the runtime
            // has already validated the owner change.
            #[allow(mutable_transmutes)]
            let owner = unsafe { transmute::<&Pubkey, &mut Pubkey>(info.owner) };
            *owner = *account.get_owner();
        }
        let new_data = account.get_data();
        if info.data_len() != new_data.len() {
            info.resize(new_data.len())?;
        }
        info.try_borrow_mut_data()?.copy_from_slice(new_data);
    }
    Ok(())
}

static INSTALL: Once = Once::new();

/// Installs the process-wide host hooks (syscall stubs and the `msg!` sink). Idempotent.
pub fn install_host_hooks() {
    INSTALL.call_once(|| {
        solana_sysvar::program_stubs::set_syscall_stubs(Box::new(NativeStubs));
        solana_msg::set_host_log_hook(log_message);
    });
}

/// A fresh runtime with mainnet features, SPL programs (SBF), the Ed25519/secp256k1
/// precompiles, signature verification, and `gpu_market` hosted natively at [`PROGRAM_ID`].
pub fn new_svm() -> LiteSVM {
    install_host_hooks();
    let mut svm = LiteSVM::new().with_log_bytes_limit(Some(100_000));
    svm.add_builtin(PROGRAM_ID, GpuMarketBuiltin::vm);
    svm
}
