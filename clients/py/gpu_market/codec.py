"""Instruction, account and event coding for gpu_market from its IDL (pure: no I/O).

:class:`Codec` wraps anchorpy's coders built from the converted IDL. Instructions are built
with explicit account metas in the IDL's account order, so the SDK never depends on
anchorpy's account resolution.
"""

from __future__ import annotations

import base64
import binascii
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, is_dataclass
from functools import lru_cache
from typing import Any

from anchorpy import Idl
from anchorpy.coder.coder import Coder
from anchorpy_core.idl import (
    IdlTypeArray,
    IdlTypeDefined,
    IdlTypeDefinitionTyEnum,
    IdlTypeDefinitionTyStruct,
    IdlTypeSimple,
)
from solders.instruction import AccountMeta, Instruction
from solders.pubkey import Pubkey

from . import idl as idl_mod
from .constants import PROGRAM_ID
from .errors import program_error_table

__all__ = ["Codec", "default_codec", "plain"]

_SIMPLE_SIZES = {
    IdlTypeSimple.Bool: 1, IdlTypeSimple.U8: 1, IdlTypeSimple.I8: 1,
    IdlTypeSimple.U16: 2, IdlTypeSimple.I16: 2, IdlTypeSimple.U32: 4, IdlTypeSimple.I32: 4,
    IdlTypeSimple.F32: 4, IdlTypeSimple.U64: 8, IdlTypeSimple.I64: 8, IdlTypeSimple.F64: 8,
    IdlTypeSimple.U128: 16, IdlTypeSimple.I128: 16, IdlTypeSimple.PublicKey: 32,
}  # fmt: skip


def _encodable(value: Any) -> Any:
    """Dataclasses -> dicts, shallowly per level (anchorpy's ``asdict`` deep-copies leaves,
    which fails on ``solders`` Pubkeys)."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _encodable(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, list):
        return [_encodable(v) for v in value]
    if isinstance(value, dict):
        return {k: _encodable(v) for k, v in value.items()}
    return value


def plain(value: Any) -> Any:
    """Decoded borsh value -> plain Python (dicts, ints, bytes, Pubkey, lower-case enums)."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, (list, tuple)):
        if value and all(type(v) is int and 0 <= v <= 255 for v in value):
            return bytes(value)  # the program's only int arrays are [u8; N]
        return [plain(v) for v in value]
    if isinstance(value, (int, str, bytes, bool, Pubkey)) or value is None:
        return value
    if hasattr(value, "index") and type(value).__module__ == "sumtypes":
        attrs = {k: plain(v) for k, v in vars(value).items() if not k.startswith("_")}
        name = type(value).__name__.lower()
        return {name: attrs} if attrs else name
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items() if not str(k).startswith("_")}
    return value


@dataclass(frozen=True)
class _Meta:
    name: str
    writable: bool
    signer: bool
    optional: bool


def _flatten(items: Sequence[Any], prefix: str = "") -> list[_Meta]:
    out: list[_Meta] = []
    for a in items:
        if hasattr(a, "accounts"):  # IdlAccounts (composite)
            out.extend(_flatten(a.accounts, f"{prefix}{a.name}."))
        else:
            out.append(
                _Meta(f"{prefix}{a.name}", a.is_mut, a.is_signer, bool(getattr(a, "is_optional", False)))
            )
    return out


class Codec:
    """Encoders/decoders for one program id and one IDL.

    Guarantees: :meth:`instruction` emits account metas in exactly the IDL order with the
    IDL's writable/signer flags and rejects missing or unknown account names;
    :meth:`decode_account` rejects unknown discriminators; :meth:`parse_events` only decodes
    ``Program data:`` lines emitted while this program is the one executing.
    """

    def __init__(self, new_idl: Mapping[str, Any], program_id: Pubkey = PROGRAM_ID) -> None:
        import json

        self.new_idl = dict(new_idl)
        self.legacy = idl_mod.to_legacy(self.new_idl)
        self.idl: Idl = Idl.from_json(json.dumps(self.legacy))
        with warnings.catch_warnings():
            # sumtypes (used by anchorpy for borsh enums) passes attrs' deprecated `repr_ns`;
            # harmless, and not ours to fix. Filtered here only, so -W error stays useful.
            warnings.filterwarnings(
                "ignore", message="The `repr_ns` argument is deprecated", category=DeprecationWarning
            )
            self.coder = Coder(self.idl)
        self.program_id = program_id
        self.errors = program_error_table(self.new_idl)
        self._ix_accounts = {ix.name: _flatten(ix.accounts) for ix in self.idl.instructions}
        self._types = {t.name: t for t in [*self.idl.accounts, *self.idl.types]}
        self._acc_by_disc = {
            idl_mod.account_discriminator(a.name): a.name for a in self.idl.accounts
        }
        self._event_by_disc = {
            idl_mod.event_discriminator(e.name): e.name for e in (self.idl.events or [])
        }

    # ------------------------------------------------------------------ instructions

    def instruction_accounts(self, name: str) -> list[str]:
        """Account names of instruction ``name`` in IDL order (composite: ``group.name``)."""
        return [m.name for m in self._ix_accounts[name]]

    def encode_instruction_data(self, name: str, args: Mapping[str, Any]) -> bytes:
        """Discriminator + borsh args of instruction ``name``."""
        if name not in self._ix_accounts:
            raise ValueError(f"unknown instruction {name!r}")
        return self.coder.instruction.encode(name, _encodable(dict(args)))

    def instruction(
        self,
        name: str,
        args: Mapping[str, Any],
        accounts: Mapping[str, Pubkey | None],
        remaining: Iterable[AccountMeta] = (),
    ) -> Instruction:
        """Build instruction ``name``; ``accounts`` maps every IDL account name to its key.

        Optional accounts may be given as None (encoded as the program id, Anchor's
        convention). Raises ValueError naming missing or unknown accounts.
        """
        metas = self._ix_accounts.get(name)
        if metas is None:
            raise ValueError(f"unknown instruction {name!r}")
        names = {m.name for m in metas}
        unknown = set(accounts) - names
        missing = [m.name for m in metas if m.name not in accounts and not m.optional]
        if unknown or missing:
            raise ValueError(
                f"instruction {name}: missing accounts {missing}, unknown accounts {sorted(unknown)}"
            )
        out = []
        for m in metas:
            key = accounts.get(m.name)
            if key is None:
                out.append(AccountMeta(self.program_id, False, False))
            else:
                out.append(AccountMeta(key, m.signer, m.writable))
        out.extend(remaining)
        return Instruction(self.program_id, self.encode_instruction_data(name, args), out)

    # ------------------------------------------------------------------ accounts

    def account_name(self, data: bytes) -> str | None:
        """Account type named by the first 8 bytes of ``data``, or None if unknown."""
        return self._acc_by_disc.get(bytes(data[:8]))

    def decode_account(self, data: bytes) -> tuple[str, Any]:
        """``(name, decoded)`` of a gpu_market account; ValueError if not one."""
        name = self.account_name(data)
        if name is None:
            raise ValueError("not a gpu_market account (unknown discriminator)")
        size = self.account_size(name)
        if len(data) < size:
            raise ValueError(f"{name} account data is {len(data)} bytes, expected {size}")
        return name, self.coder.accounts.decode(bytes(data))

    def encode_account(self, name: str, value: Any) -> bytes:
        """Discriminator + borsh of account ``name`` (``value``: dataclass or dict)."""
        from anchorpy.program.common import NamedInstruction

        return self.coder.accounts.build(NamedInstruction(name=name, data=_encodable(value)))

    def type_size(self, ty: Any) -> int:
        """Borsh size of a fixed-size IDL type (ValueError for vec/string/bytes/option)."""
        if isinstance(ty, IdlTypeSimple):
            if ty not in _SIMPLE_SIZES:
                raise ValueError(f"{ty} has no fixed size")
            return _SIMPLE_SIZES[ty]
        if isinstance(ty, IdlTypeArray):
            return self.type_size(ty.array[0]) * ty.array[1]
        if isinstance(ty, IdlTypeDefined):
            td = self._types[ty.defined].ty
            if isinstance(td, IdlTypeDefinitionTyStruct):
                return sum(self.type_size(f.ty) for f in td.fields)
            if isinstance(td, IdlTypeDefinitionTyEnum):
                sizes = [
                    sum(self.type_size(getattr(f, "ty", f)) for f in (v.fields.fields if v.fields else []))
                    for v in td.variants
                ]
                if len(set(sizes)) > 1:
                    raise ValueError(f"enum {ty.defined} has variable size")
                return 1 + sizes[0]
        raise ValueError(f"{ty} has no fixed size")  # vec, option, string, bytes

    def account_size(self, name: str) -> int:
        """On-chain data length of account ``name``: 8 + its fields (all fixed size).

        Enums whose variants differ in size (ProviderStatus) take their largest variant,
        as Anchor's ``InitSpace`` does.
        """
        return 8 + self._struct_size(name)

    def _struct_size(self, name: str) -> int:
        total = 0
        for f in self._types[name].ty.fields:
            total += self._max_size(f.ty)
        return total

    def _max_size(self, ty: Any) -> int:
        if isinstance(ty, IdlTypeDefined):
            td = self._types[ty.defined].ty
            if isinstance(td, IdlTypeDefinitionTyEnum):
                return 1 + max(
                    sum(self._max_size(getattr(f, "ty", f)) for f in (v.fields.fields if v.fields else []))
                    for v in td.variants
                )
            return sum(self._max_size(f.ty) for f in td.fields)
        if isinstance(ty, IdlTypeArray):
            return self._max_size(ty.array[0]) * ty.array[1]
        return self.type_size(ty)

    def field_offset(self, account: str, field: str) -> int:
        """Byte offset of ``field`` in account ``account`` data (after the discriminator).

        Only valid while every earlier field has a fixed size; raises ValueError otherwise.
        """
        offset = 8
        for f in self._types[account].ty.fields:
            if f.name == field:
                return offset
            offset += self.type_size(f.ty)
        raise ValueError(f"{account} has no field {field!r}")

    def enum_index(self, type_name: str, variant: str) -> int:
        """Borsh tag of ``variant`` (case-insensitive) of enum ``type_name``."""
        td = self._types[type_name].ty
        for i, v in enumerate(td.variants):
            if v.name.lower() == variant.lower():
                return i
        raise ValueError(f"{type_name} has no variant {variant!r}")

    # ------------------------------------------------------------------ events

    def decode_event(self, data: bytes) -> tuple[str, Any] | None:
        """``(name, decoded)`` of an event payload, or None if the discriminator is unknown."""
        name = self._event_by_disc.get(bytes(data[:8]))
        if name is None:
            return None
        event = self.coder.events.parse(bytes(data))
        return name, event.data

    def parse_events(self, logs: Sequence[str]) -> list[tuple[str, Any]]:
        """Events emitted by this program, in order, from a transaction's log lines.

        Tracks the invoke stack (``Program X invoke [n]`` / ``Program X success|failed``) so
        ``Program data:`` lines of other programs (CPI callees, other instructions) are
        ignored; unknown discriminators and undecodable payloads are skipped.
        """
        pid = str(self.program_id)
        stack: list[str] = []
        out: list[tuple[str, Any]] = []
        for line in logs:
            if line.startswith("Program ") and " invoke [" in line:
                stack.append(line[len("Program ") :].split(" ", 1)[0])
            elif line.startswith("Program ") and (
                line.endswith(" success") or " failed" in line
            ):
                if stack:
                    stack.pop()
            elif line.startswith("Program data: ") and stack and stack[-1] == pid:
                for chunk in line[len("Program data: ") :].split(" "):
                    try:
                        raw = base64.b64decode(chunk, validate=True)
                    except (binascii.Error, ValueError):
                        continue
                    try:
                        ev = self.decode_event(raw)
                    except Exception:  # noqa: BLE001 - a malformed payload is not an event
                        ev = None
                    if ev is not None:
                        out.append(ev)
        return out


@lru_cache(maxsize=4)
def _cached(path: str, program_id: str) -> Codec:
    return Codec(idl_mod.load_idl_json(path), Pubkey.from_string(program_id))


def default_codec(program_id: Pubkey = PROGRAM_ID, idl_path: str | None = None) -> Codec:
    """The codec of the committed IDL (or ``$GPU_MARKET_IDL``), cached."""
    path = str(idl_path or idl_mod.default_idl_path())
    return _cached(path, str(program_id))
