"""Redis Lua scripts with named keys and arguments, built from a small dataclass per script.

A script's call is a ``Call`` dataclass: its fields, in order, are the script's keys (``key()``), its
arguments (``arg()``) and at most one list of items (``items()``), each item a ``Call`` of its own (one per
job of a batch finish, say). ``Script(call, body)`` puts a prelude before ``body`` that names them, so the
body never counts positions:

- ``K.<name>`` and ``A.<name>``: the call's keys and arguments;
- ``N``: how many items the call carries, and ``item(i)`` (1-based): the i-th item's keys and arguments,
  as two tables with the item class's names.

``Script.keys_and_args(call)`` flattens a call into Redis' KEYS and ARGV in the same order, and
``tests/unit/test_scripts.py`` checks every script's body against its call class: every ``K.``, ``A.``
name it reads is declared, and no body indexes KEYS or ARGV itself.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any, ClassVar, Generic, TypeVar, cast

from redis.asyncio import Redis

_ROLE = "script_role"


def key() -> Any:
    """A field that is one of the script's KEYS."""
    return field(metadata={_ROLE: "key"})


def arg(default: Any = MISSING) -> Any:
    """A field that is one of the script's ARGV (a ``default`` when given: '' reads as "none" in Lua)."""
    return field(default=default, metadata={_ROLE: "arg"})


def items() -> Any:
    """The field holding the call's items: a list of ``Call`` of the script's item class."""
    return field(default_factory=list, metadata={_ROLE: "items"})


@dataclass
class Call:
    """The keys, arguments and items of one script call (see the module)."""

    item_class: ClassVar[type[Call] | None] = None


def _fields(cls: type[Call], role: str) -> list[Field[Any]]:
    return [f for f in fields(cls) if f.metadata.get(_ROLE) == role]


def names(cls: type[Call]) -> tuple[list[str], list[str]]:
    """The key names and the argument names of ``cls``, in order."""
    return [f.name for f in _fields(cls, "key")], [f.name for f in _fields(cls, "arg")]


def _table(names_: list[str], array: str, offset: str) -> str:
    return "{" + ", ".join(f"{name} = {array}[{offset}{n + 1}]" for n, name in enumerate(names_)) + "}"


def prelude(cls: type[Call]) -> str:
    """The Lua that names the keys and arguments of ``cls`` (and of its items) for a script's body."""
    key_names, arg_names = names(cls)
    lines = [f"local K = {_table(key_names, 'KEYS', '')}", f"local A = {_table(arg_names, 'ARGV', '')}"]
    item = cls.item_class
    if item is not None:
        item_keys, item_args = names(item)
        if item_keys:
            lines.append(f"local N = (#KEYS - {len(key_names)}) / {len(item_keys)}")
        else:
            lines.append(f"local N = (#ARGV - {len(arg_names)}) / {len(item_args)}")
        lines += [
            "local function item(i)",
            f"  local k, a = {len(key_names)} + {len(item_keys)} * (i - 1), "
            f"{len(arg_names)} + {len(item_args)} * (i - 1)",
            f"  return {_table(item_keys, 'KEYS', 'k + ')}, {_table(item_args, 'ARGV', 'a + ')}",
            "end",
        ]
    return "\n".join(lines) + "\n"


C = TypeVar("C", bound=Call)


@dataclass(frozen=True)
class Script(Generic[C]):
    """A Lua script called with a ``call`` of class ``call``: ``text`` is ``before`` (shared Lua
    functions), the prelude naming the call's fields, then ``body``."""

    call: type[C]
    body: str
    before: str = ""
    text: str = field(init=False)
    sha: str = field(init=False)

    def __post_init__(self) -> None:
        text = self.before + prelude(self.call) + self.body
        object.__setattr__(self, "text", text)
        object.__setattr__(self, "sha", hashlib.sha1(text.encode()).hexdigest())

    def keys_and_args(self, call: C) -> tuple[list[Any], list[Any]]:
        """``call`` as Redis' KEYS and ARGV: its keys, then its arguments, then each item's in turn."""
        keys_ = [getattr(call, f.name) for f in _fields(self.call, "key")]
        args = [getattr(call, f.name) for f in _fields(self.call, "arg")]
        for holder in _fields(self.call, "items"):
            for one in getattr(call, holder.name):
                keys_ += [getattr(one, f.name) for f in _fields(type(one), "key")]
                args += [getattr(one, f.name) for f in _fields(type(one), "arg")]
        return keys_, args

    async def run(self, redis: Redis, call: C) -> Any:
        """Run the script for ``call`` (by its sha, loading it when Redis does not know it yet)."""
        keys_, args = self.keys_and_args(call)
        return await cast(Awaitable[Any], redis.register_script(self.text)(keys=keys_, args=args))
