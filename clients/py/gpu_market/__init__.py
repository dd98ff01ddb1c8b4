"""gpu-market client SDK: IDL, PDAs, typed instructions, settle transactions, the gpum CLI.

Layers, lowest first (no import circles: a test pins it): ``idl`` -> ``codec`` ->
``accounts``/``pda`` -> ``instructions`` (one pure builder per program instruction) ->
``settle``/``committee``/``admin``/``lifecycle`` -> ``client`` (reads, checks, builds, sends)
-> ``cli``. The module map is ``clients/py/README.md``.

The public API is ``__all__`` (pinned by ``tests/test_public_api.py``); the contract is
``docs/sdk-api.md``. ``gpu_market.deploy(gpu="H100:1", image=..., ports=[8888], hours=2)``
rents GPUs and runs a container in one call (:mod:`gpu_market.deployment`);
``gpu_market.create_cluster(gpu_type="A100", gpu_count=4, nodes=2, image=...)`` rents several
nodes on one private network (:mod:`gpu_market.cluster`). Importing the
package is cheap: the client, codec and views (which pull in anchorpy and solana-py) load on
first attribute access, so ``gpu_market.receipt`` and ``gpu_market.proof`` stay usable on
their own.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "DEFAULT_MARKET_PARAMS",
    "PROGRAM_ID",
    "AccountNotFound",
    "Attestation",
    "ChainError",
    "Cluster",
    "ClusterError",
    "ConfirmationTimeout",
    "DeployError",
    "Deployment",
    "GpuMarketClient",
    "GpuMarketError",
    "InvalidAccount",
    "JobView",
    "MarketView",
    "ProviderView",
    "RpcUnavailable",
    "SdkError",
    "SettleItem",
    "TransactionTooLarge",
    "ValidatorView",
    "create_cluster",
    "deploy",
    "open_cluster",
]

_LAZY = {
    "PROGRAM_ID": "constants",
    "DEFAULT_MARKET_PARAMS": "client",
    "Attestation": "settle",
    "GpuMarketClient": "client",
    "InvalidAccount": "client",
    "SettleItem": "settle",
    "AccountNotFound": "errors",
    "ChainError": "errors",
    "ConfirmationTimeout": "errors",
    "GpuMarketError": "errors",
    "RpcUnavailable": "errors",
    "SdkError": "errors",
    "TransactionTooLarge": "errors",
    "JobView": "accounts",
    "MarketView": "accounts",
    "ProviderView": "accounts",
    "ValidatorView": "accounts",
    "DeployError": "deployment",
    "Deployment": "deployment",
    "deploy": "deployment",
    "Cluster": "cluster",
    "ClusterError": "cluster",
    "create_cluster": "cluster",
    "open_cluster": "cluster",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gpu_market' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
