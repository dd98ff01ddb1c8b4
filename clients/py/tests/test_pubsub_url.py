import pytest
from gpu_market.pubsub import pubsub_url


def test_pubsub_url_is_the_rpc_port_plus_one() -> None:
    assert pubsub_url("http://127.0.0.1:8899") == "ws://127.0.0.1:8900"
    assert pubsub_url("https://rpc.example.org:443/x") == "wss://rpc.example.org:444/x"
    assert pubsub_url("https://api.mainnet-beta.solana.com") == "wss://api.mainnet-beta.solana.com"
    assert pubsub_url("http://[::1]:8899") == "ws://[::1]:8900"
    with pytest.raises(ValueError, match="http:// or https://"):
        pubsub_url("ftp://x:1")
