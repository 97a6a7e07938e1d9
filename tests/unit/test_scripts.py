"""Every Redis script reads its keys and arguments by the names its ``Call`` class declares, and the
builder hands Redis exactly those, in order (``worker.jobs.scripts``)."""

from __future__ import annotations

import importlib
import pkgutil
import re
from dataclasses import dataclass

import pytest

import worker
from tests.conftest import RedisServer
from worker.jobs.connection import connect
from worker.jobs.scripts import Call, Script, arg, items, key, names


def every_script() -> dict[str, Script[Call]]:
    """Each ``Script`` defined at the top level of a worker module, by ``module.NAME``."""
    found: dict[str, Script[Call]] = {}
    for info in pkgutil.walk_packages(worker.__path__, "worker."):
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if isinstance(value, Script):
                found.setdefault(f"{value.call.__module__}.{name}", value)
    return found


SCRIPTS = every_script()


def test_the_scripts_are_found() -> None:
    """The walk finds the job store's, the outbox's, the queue's, the leases', the consumer's and the
    registry's."""
    short = {name.rsplit(".", 1)[-1] for name in SCRIPTS}
    assert {"SWAP", "SWAP_MANY", "FINISH_MANY", "RECORD", "CREATE", "TAKE_OVER", "KEEP"} <= short
    assert {"ACCEPT", "GRANT", "RENEW", "RELEASE", "CLEAR_STALE", "SET_HEAD"} <= short


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_a_body_reads_only_declared_names_and_never_a_position(name: str) -> None:
    """No ``KEYS[``/``ARGV[`` in a body; each ``K.x``/``A.x`` (and an item's ``key.x``/``arg.x``) is a
    field of the call (or item) class, and every declared field is read."""
    script = SCRIPTS[name]
    body = script.body
    assert "KEYS[" not in body and "ARGV[" not in body
    key_names, arg_names = names(script.call)
    read_keys = set(re.findall(r"\bK\.(\w+)", body))
    read_args = set(re.findall(r"\bA\.(\w+)", body))
    assert read_keys <= set(key_names) and read_args <= set(arg_names), name
    item = script.call.item_class
    if item is None:
        assert "item(" not in body
        unread = (set(key_names) - read_keys) | (set(arg_names) - read_args)
    else:
        item_keys, item_args = names(item)
        assert set(re.findall(r"\bkey\.(\w+)", body)) <= set(item_keys), name
        assert set(re.findall(r"\barg\.(\w+)", body)) <= set(item_args), name
        unread = (set(key_names) - read_keys) | (set(arg_names) - read_args)
        unread |= set(item_keys) - set(re.findall(r"\bkey\.(\w+)", body))
        unread |= set(item_args) - set(re.findall(r"\barg\.(\w+)", body))
    assert not unread, f"{name} declares fields its body never reads: {sorted(unread)}"


@dataclass
class Pair(Call):
    name: str = key()
    value: str = arg()
    weight: int = arg()


@dataclass
class Pairs(Call):
    item_class = Pair
    total: str = key()
    label: str = arg()
    pairs: list[Pair] = items()


ECHO = Script(
    Pairs,
    body="""
local out = {A.label, N}
for i = 1, N do
  local key, arg = item(i)
  redis.call('SET', key.name, arg.value)
  redis.call('INCRBY', K.total, arg.weight)
  out[#out + 1] = key.name .. '=' .. arg.value
end
return out
""",
)


def test_a_call_flattens_in_declared_order() -> None:
    """Keys, then arguments, then each item's keys and arguments."""
    call = Pairs(total="t", label="L", pairs=[Pair("a", "1", 2), Pair("b", "3", 4)])
    assert ECHO.keys_and_args(call) == (["t", "a", "b"], ["L", "1", 2, "3", 4])


async def test_a_script_reads_its_call_by_name_on_real_redis(redis_server: RedisServer) -> None:
    """The prelude's names and item(i) read what the builder sent, for any number of items."""
    redis = await connect(redis_server.url)
    try:
        await redis.delete("scripts:t", "scripts:a", "scripts:b", "scripts:c")
        call = Pairs("scripts:t", "L", [Pair("scripts:a", "x", 2), Pair("scripts:b", "y", 5)])
        assert await ECHO.run(redis, call) == [b"L", 2, b"scripts:a=x", b"scripts:b=y"]
        assert await redis.get("scripts:t") == b"7"
        assert await ECHO.run(redis, Pairs("scripts:t", "none")) == [b"none", 0]
    finally:
        await redis.aclose()
