"""What the builders share: the address of an account view they were handed."""

from __future__ import annotations

from typing import Any

from solders.pubkey import Pubkey


def address_of(view: Any, builder: str) -> Pubkey:
    """``view.address``; ValueError naming ``builder`` when the view was decoded from bare
    bytes (no address), since its accounts could not be named."""
    if view.address is None:
        raise ValueError(f"{builder} needs a {type(view).__name__} with its address")
    return view.address
