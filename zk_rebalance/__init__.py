"""Scheme one: the Kafka 0.8 ZooKeeper-watch consumer rebalancer (faithful, instrumented).

    from zk_rebalance import ZkGroupMember
    with ZkGroupMember("127.0.0.1:2181", "grp", ["clicks"], event_log="m1.jsonl") as m:
        m.wait_for_stable(10)
        print(m.assignment())

See docs/zk_rebalance.md.
"""

from zk_rebalance.layout import Blacklist, InvalidGroupId, InvalidRegistration, Whitelist
from zk_rebalance.member import ConsumerRebalanceFailed, RebalanceListener, ZkGroupMember, ZkMemberState

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
