//! Byte-level parsing of SPL Token (and Token-2022 base layout) accounts and mints, shared by
//! the ledger (token balances of transactions) and the RPC layer (jsonParsed, token methods).
use serde_json::{json, Value};
use solana_account::{AccountSharedData, ReadableAccount};
use solana_pubkey::Pubkey;

/// SPL Token program id.
pub const TOKEN_PROGRAM: Pubkey = Pubkey::from_str_const("TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA");
/// SPL Token-2022 program id.
pub const TOKEN_2022_PROGRAM: Pubkey =
    Pubkey::from_str_const("TokenzQdBNbLqP5VEhdkAS6EPFLC1PazBjmkTWdGZcf");
/// The wrapped-SOL mint (9 decimals even where its account is absent).
pub const NATIVE_MINT: Pubkey = Pubkey::from_str_const("So11111111111111111111111111111111111111112");

pub const ACCOUNT_LEN: usize = 165;
pub const MINT_LEN: usize = 82;
/// Token-2022 `AccountType` byte position for extended accounts.
const ACCOUNT_TYPE_INDEX: usize = 165;

pub struct TokenAccount {
    pub mint: Pubkey,
    pub owner: Pubkey,
    pub amount: u64,
    pub delegate: Option<Pubkey>,
    /// 0 uninitialized, 1 initialized, 2 frozen.
    pub state: u8,
    pub is_native: Option<u64>,
    pub delegated_amount: u64,
    pub close_authority: Option<Pubkey>,
    /// Token-2022 account with extensions (not parsed here).
    pub extended: bool,
}

pub struct Mint {
    pub mint_authority: Option<Pubkey>,
    pub supply: u64,
    pub decimals: u8,
    pub is_initialized: bool,
    pub freeze_authority: Option<Pubkey>,
    pub extended: bool,
}

fn is_token_program(p: &Pubkey) -> bool {
    *p == TOKEN_PROGRAM || *p == TOKEN_2022_PROGRAM
}

fn pk(d: &[u8], at: usize) -> Pubkey {
    Pubkey::new_from_array(d[at..at + 32].try_into().expect("32 bytes"))
}
fn u64_at(d: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(d[at..at + 8].try_into().expect("8 bytes"))
}
fn copt_pk(d: &[u8], at: usize) -> Option<Pubkey> {
    (d[at..at + 4] == [1, 0, 0, 0]).then(|| pk(d, at + 4))
}

/// An initialized (or frozen) token account of either token program.
pub fn parse_token_account(acc: &AccountSharedData) -> Option<TokenAccount> {
    let d = acc.data();
    if !is_token_program(acc.owner()) {
        return None;
    }
    let extended = d.len() > ACCOUNT_LEN;
    if d.len() < ACCOUNT_LEN
        || (extended && (*acc.owner() != TOKEN_2022_PROGRAM || d[ACCOUNT_TYPE_INDEX] != 2))
        || d[108] == 0
        || d[108] > 2
    {
        return None;
    }
    Some(TokenAccount {
        mint: pk(d, 0),
        owner: pk(d, 32),
        amount: u64_at(d, 64),
        delegate: copt_pk(d, 72),
        state: d[108],
        is_native: (d[109..113] == [1, 0, 0, 0]).then(|| u64_at(d, 113)),
        delegated_amount: u64_at(d, 121),
        close_authority: copt_pk(d, 129),
        extended,
    })
}

/// An initialized mint of either token program.
pub fn parse_mint(acc: &AccountSharedData) -> Option<Mint> {
    let d = acc.data();
    if !is_token_program(acc.owner()) || d.len() < MINT_LEN || d.len() == ACCOUNT_LEN {
        return None;
    }
    let extended = d.len() > MINT_LEN;
    if extended && (*acc.owner() != TOKEN_2022_PROGRAM || d.get(ACCOUNT_TYPE_INDEX) != Some(&1)) {
        return None;
    }
    if d[45] != 1 {
        return None;
    }
    Some(Mint {
        mint_authority: copt_pk(d, 0),
        supply: u64_at(d, 36),
        decimals: d[44],
        is_initialized: true,
        freeze_authority: copt_pk(d, 46),
        extended,
    })
}

/// Agave's `UiTokenAmount`.
pub fn ui_amount(amount: u64, decimals: u8) -> Value {
    let ui = 10u64
        .checked_pow(decimals as u32)
        .map(|d| amount as f64 / d as f64);
    json!({
        "amount": amount.to_string(),
        "decimals": decimals,
        "uiAmount": ui,
        "uiAmountString": real_number_string_trimmed(amount, decimals),
    })
}

fn real_number_string_trimmed(amount: u64, decimals: u8) -> String {
    let decimals = decimals as usize;
    if decimals == 0 {
        return amount.to_string();
    }
    let mut s = format!("{:01$}", amount, decimals + 1);
    s.insert(s.len() - decimals, '.');
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}
