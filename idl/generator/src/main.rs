//! `gpum-idl [PROGRAM_DIR]`: prints the program's IDL (new Anchor spec) as pretty JSON.
//!
//! Anchor's builder runs `cargo +$RUSTUP_TOOLCHAIN test __anchor_private_print_idl --features
//! idl-build` in the program directory with its own RUSTFLAGS; the Makefile sets
//! `RUSTUP_TOOLCHAIN=stable` so nothing is downloaded. Its build goes to `<target>/idl` so it
//! does not invalidate the main build cache.
use std::{env, path::PathBuf, process::ExitCode};

fn main() -> ExitCode {
    let program = env::args().nth(1).unwrap_or_else(|| "programs/gpu_market".into());
    let program = match PathBuf::from(&program).canonicalize() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("gpum-idl: program directory {program:?}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let target = env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| program.join("../../target"));
    env::set_var("CARGO_TARGET_DIR", target.join("idl"));
    // Resolution on: every PDA account carries its `pda` seeds, program and sysvar accounts
    // their `address`, and `has_one` targets their `relations`, so Anchor's client (and Codama's
    // generated one) fill in what the program can derive.
    match anchor_lang_idl::build::IdlBuilder::new()
        .program_path(program)
        .resolution(true)
        .build()
    {
        Ok(idl) => {
            println!("{}", serde_json::to_string_pretty(&idl).expect("IDL serializes"));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("gpum-idl: {e:#}");
            ExitCode::FAILURE
        }
    }
}
