//! Drop-in replacement for `solana-msg` 3.1 (patched in through `[patch.crates-io]`).
//!
//! On SBF it is the upstream crate: `sol_log` is the `sol_log_` syscall. Off SBF the upstream
//! crate prints to stdout, where a native program's logs are lost to the runtime. Here the
//! host path calls a hook that the native runtime harness (`gpum-localnet`) installs with
//! [`set_host_log_hook`]; it records the message as `Program log: ...` in the running
//! transaction's log collector, which is exactly what a cluster shows. Without a hook the
//! message is printed as upstream does.
#![no_std]
#[cfg(feature = "alloc")]
extern crate alloc;
#[cfg(any(feature = "std", not(target_os = "solana")))]
extern crate std;

#[cfg(feature = "alloc")]
#[doc(hidden)]
pub use alloc::format;

/// Print a message to the log.
#[cfg(feature = "alloc")]
#[macro_export]
macro_rules! msg {
    ($msg:expr) => {
        $crate::sol_log($msg)
    };
    ($($arg:tt)*) => ($crate::sol_log(&$crate::format!($($arg)*)));
}

#[cfg(target_os = "solana")]
pub mod syscalls {
    pub use solana_define_syscall::definitions::{
        sol_log_, sol_log_64_, sol_log_compute_units_, sol_log_data,
    };
}

#[cfg(not(target_os = "solana"))]
static HOST_LOG_HOOK: std::sync::OnceLock<fn(&str)> = std::sync::OnceLock::new();

/// Installs the host log sink (first call wins). Host only.
#[cfg(not(target_os = "solana"))]
pub fn set_host_log_hook(hook: fn(&str)) {
    let _ = HOST_LOG_HOOK.set(hook);
}

/// Print a string to the log.
#[inline]
pub fn sol_log(message: &str) {
    #[cfg(target_os = "solana")]
    unsafe {
        syscalls::sol_log_(message.as_ptr(), message.len() as u64);
    }

    #[cfg(not(target_os = "solana"))]
    match HOST_LOG_HOOK.get() {
        Some(hook) => hook(message),
        None => std::println!("{message}"),
    }
}
