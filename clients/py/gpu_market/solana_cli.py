"""What the Solana CLI's own files say: cluster monikers, the default keypair path and the
``json_rpc_url`` / ``keypair_path`` of its config file. Shared by the ``gpum`` CLI and
``gpu_market.deploy``, so both resolve defaults the way ``solana`` does; pure but for reading
that one file (an unreadable or missing file reads as empty).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["DEFAULT_KEYPAIR", "MONIKERS", "SOLANA_CONFIG", "solana_config"]

MONIKERS = {
    "localnet": "http://127.0.0.1:8899",
    "localhost": "http://127.0.0.1:8899",
    "devnet": "https://api.devnet.solana.com",
    "testnet": "https://api.testnet.solana.com",
    "mainnet-beta": "https://api.mainnet-beta.solana.com",
    "l": "http://127.0.0.1:8899",
    "d": "https://api.devnet.solana.com",
    "t": "https://api.testnet.solana.com",
    "m": "https://api.mainnet-beta.solana.com",
}
DEFAULT_KEYPAIR = "~/.config/solana/id.json"
SOLANA_CONFIG = "~/.config/solana/cli/config.yml"
"""The Solana CLI config; ``$GPUM_SOLANA_CONFIG`` names another file."""


def solana_config() -> dict[str, str]:
    """``json_rpc_url`` and ``keypair_path`` from the Solana CLI config, if readable."""
    path = Path(os.environ.get("GPUM_SOLANA_CONFIG", SOLANA_CONFIG)).expanduser()
    out: dict[str, str] = {}
    try:
        for line in path.read_text().splitlines():
            key, sep, value = line.partition(":")
            if sep and key.strip() in ("json_rpc_url", "keypair_path"):
                out[key.strip()] = value.strip().strip("'\"")
    except OSError:
        pass
    return out
