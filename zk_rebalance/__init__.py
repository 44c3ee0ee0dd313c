"""Scheme one: the Kafka 0.8 ZooKeeper-watch consumer rebalancer (faithful, instrumented).

    from zk_rebalance import ZkGroupMember
    with ZkGroupMember("127.0.0.1:2181", "grp", ["clicks"], event_log="m1.jsonl") as m:
        m.wait_for_stable(10)
        print(m.assignment())

See docs/zk_rebalance.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from zk_rebalance.layout import Blacklist, InvalidGroupId, InvalidRegistration, Whitelist

if TYPE_CHECKING:
    from zk_rebalance.member import ConsumerRebalanceFailed, RebalanceListener, ZkGroupMember, ZkMemberState

# The member (the rebalancer, its watches and assignors) is imported on first use of one of its
# names, so that reading the layout (`import zk_rebalance.layout`, e.g. `groupshift groups list`)
# does not run it.
_FROM_MEMBER = frozenset({"ConsumerRebalanceFailed", "RebalanceListener", "ZkGroupMember", "ZkMemberState"})


def __getattr__(name: str):
    if name in _FROM_MEMBER:
        from zk_rebalance import member

        value = globals()[name] = getattr(member, name)
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_FROM_MEMBER})


__all__ = [
    "Blacklist",
    "ConsumerRebalanceFailed",
    "InvalidGroupId",
    "InvalidRegistration",
    "ZkMemberState",
    "RebalanceListener",
    "Whitelist",
    "ZkGroupMember",
]
