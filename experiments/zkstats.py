"""ZooKeeper server-side counters for experiments and benchmarks: mntr and wchc deltas.

before = server_counts(host, port)
...                                    # the step being measured
delta(server_counts(host, port), before)   # {"requests": .., "watch_notifications": ..}
watches(host, port)                    # {"watches": .., "watching_sessions": ..} at rest
"""

from __future__ import annotations

from collections import Counter

from core.four_letter import four_letter, mntr


def server_counts(host: str, port: int) -> dict[str, int]:
    """Cumulative `mntr` counters: `zk_packets_received` and the sum of `zk_sum_node_*_watch_count`."""
    m = mntr(host, port)
    watch_count = sum(
        int(m.get(f"zk_sum_node_{k}_watch_count", 0)) for k in ("created", "deleted", "changed", "children")
    )
    return {"requests": int(m.get("zk_packets_received", 0)), "watch_notifications": watch_count}


def watches(host: str, port: int) -> dict[str, int]:
    """Watches held at rest: `mntr` zk_watch_count and the sessions `wchc` lists."""
    sessions = sum(1 for line in four_letter(host, port, "wchc").splitlines() if line.startswith("0x"))
    return {"watches": int(mntr(host, port).get("zk_watch_count", 0)), "watching_sessions": sessions}


def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    """`after - before`, key by key (the keys of `after`)."""
    return {k: after[k] - before[k] for k in after}


def cluster_counts(addresses: list[tuple[str, int]]) -> dict[str, int]:
    """`server_counts` and `watches` summed over the servers of a cluster (unreachable ones skipped)."""
    total: Counter[str] = Counter()
    for host, port in addresses:
        try:
            total.update(server_counts(host, port))
            total.update(watches(host, port))
        except OSError:
            continue
    return dict(total)
