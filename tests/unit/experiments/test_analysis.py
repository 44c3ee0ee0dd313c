"""The experiments' analysis over hand-written processing logs: how commits in flight across a pause
are placed, what counts as a zombie's accepted commit, two owners at a commit, in-doubt settlement."""

from __future__ import annotations

from experiments import analysis


def ev(t: float, ev_: str, member: str = "", **kw) -> dict:
    return {"t": t, "ev": ev_, "member": member, **kw}


def takeover_log(next_reader_first: int, zombie_ack: float) -> list[dict]:
    """Member a holds t-0, commits [0, 9] (in flight while the driver pauses it), b takes t-0 over
    at 10 and reads from `next_reader_first`; a's commit answer is logged at `zombie_ack`."""
    return [
        ev(0, "assigned", "a", partitions=["t-0"]),
        ev(1, "process", "a", tp="t-0", first=0, last=9, gen=1),
        ev(2, "commit_begin", "a", gen=1, batches=[["t-0", 0, 9]]),
        ev(2.1, "paused", victim="a"),
        ev(10, "assigned", "b", partitions=["t-0"]),
        ev(11, "process", "b", tp="t-0", first=next_reader_first, last=19, gen=2),
        ev(12, "commit_begin", "b", gen=2, batches=[["t-0", next_reader_first, 19]]),
        ev(
            12.1, "commit", "b", ok=True, gen=2, offsets={"t-0": 20}, batches=[["t-0", next_reader_first, 19]]
        ),
        ev(20, "resumed", victim="a"),
        ev(zombie_ack, "commit", "a", ok=True, gen=1, offsets={"t-0": 10}, batches=[["t-0", 0, 9]]),
        ev(21, "lost", "a", partitions=["t-0"]),
    ]


def test_a_commit_in_flight_across_a_pause_landed_when_the_next_owner_resumed_at_its_offset():
    events = takeover_log(next_reader_first=10, zombie_ack=20.5)
    placed = {e["member"]: e["t"] for e in analysis.landed(events)}
    assert placed == {"a": 2, "b": 12.1}
    z = analysis.zombie(events, "a", since=2.1)
    assert z["takeover"] and z["commits_accepted"] == 0
    summary = analysis.summary(events, ends={"t-0": 20}, since=2.1)
    assert summary["max_owners_at_commit"] == 1 and summary["duplicate_committed"] == 0
    assert summary["lost"] == 0


def test_a_commit_acknowledged_after_the_next_owner_read_older_records_is_a_zombie_commit():
    events = takeover_log(next_reader_first=0, zombie_ack=20.5)
    assert {e["member"]: e["t"] for e in analysis.landed(events)} == {"a": 20.5, "b": 12.1}
    assert analysis.zombie(events, "a", since=2.1)["commits_accepted"] == 1
    summary = analysis.summary(events, ends={"t-0": 20}, since=2.1)
    assert summary["max_owners_at_commit"] == 2
    assert summary["duplicate_committed"] == 10
    assert summary["offset_regressions"] == 1


def test_a_killed_members_commit_is_settled_from_where_the_next_owner_started():
    events = [
        ev(0, "assigned", "a", partitions=["t-0"]),
        ev(1, "process", "a", tp="t-0", first=0, last=9, gen=1),
        ev(2, "commit_begin", "a", gen=1, batches=[["t-0", 0, 9]]),
        ev(3, "killed", victim="a"),
        ev(10, "assigned", "b", partitions=["t-0"]),
        ev(11, "process", "b", tp="t-0", first=10, last=19, gen=2),
        ev(12, "commit_begin", "b", gen=2, batches=[["t-0", 10, 19]]),
        ev(12.1, "commit", "b", ok=True, gen=2, offsets={"t-0": 20}, batches=[["t-0", 10, 19]]),
    ]
    (doubt,) = analysis.in_doubt(events)
    assert doubt["member"] == "a" and doubt["committed"] == [["t-0", 0, 9]]
    assert not doubt["reported_failed"]
    assert analysis.summary(events, ends={"t-0": 20}, since=3)["lost"] == 0
    # had b started over at 0, a's commit did not land: its records are b's output, once
    events[5] = ev(11, "process", "b", tp="t-0", first=0, last=19, gen=2)
    events[6] = ev(12, "commit_begin", "b", gen=2, batches=[["t-0", 0, 19]])
    events[7] = ev(12.1, "commit", "b", ok=True, gen=2, offsets={"t-0": 20}, batches=[["t-0", 0, 19]])
    assert analysis.in_doubt(events)[0]["committed"] == []
    summary = analysis.summary(events, ends={"t-0": 20}, since=3)
    assert summary["lost"] == 0 and summary["duplicate_committed"] == 0


def test_a_refused_commit_is_not_settled_by_a_reader_that_continues_from_its_own_position():
    """A fenced member's refused commits of a range the new owner had already read and committed
    itself: the new owner's next read starts where the refused commit would have left the offset,
    but it continues from its own position, so it proves nothing (a reproduced follower-partition
    run counted 200 outputs twice this way)."""
    events = [
        ev(0, "assigned", "a", partitions=["t-0"]),
        ev(1, "process", "a", tp="t-0", first=0, last=9, gen=1),
        ev(1.1, "commit_begin", "a", gen=1, batches=[["t-0", 0, 9]]),
        ev(1.2, "commit", "a", ok=True, gen=1, offsets={"t-0": 10}, batches=[["t-0", 0, 9]]),
        ev(5, "assigned", "b", partitions=["t-0"]),  # a was fenced meanwhile and does not know yet
        ev(5.1, "process", "b", tp="t-0", first=10, last=19, gen=2),
        ev(5.2, "process", "a", tp="t-0", first=10, last=19, gen=1),
        ev(5.3, "commit_begin", "a", gen=1, batches=[["t-0", 10, 19]]),
        ev(5.4, "commit_begin", "b", gen=2, batches=[["t-0", 10, 19]]),
        ev(5.5, "commit", "a", ok=False, gen=1, error="UNKNOWN_MEMBER_ID", batches=[["t-0", 10, 19]]),
        ev(5.6, "commit", "b", ok=True, gen=2, offsets={"t-0": 20}, batches=[["t-0", 10, 19]]),
        ev(5.7, "process", "b", tp="t-0", first=20, last=29, gen=2),
        ev(5.8, "lost", "a", partitions=["t-0"]),
        ev(5.9, "commit_begin", "b", gen=2, batches=[["t-0", 20, 29]]),
        ev(6.0, "commit", "b", ok=True, gen=2, offsets={"t-0": 30}, batches=[["t-0", 20, 29]]),
    ]
    (doubt,) = analysis.in_doubt(events)
    assert doubt["member"] == "a" and doubt["committed"] == []
    summary = analysis.summary(events, ends={"t-0": 30}, since=5)
    assert summary["duplicate_committed"] == 0 and summary["lost"] == 0
    # had a's refused commit been an earlier attempt that landed before b took the partition,
    # b's first read would start after it
    landed_first = [
        *events[:4],
        ev(3.9, "process", "a", tp="t-0", first=10, last=19, gen=1),
        ev(4.0, "commit_begin", "a", gen=1, batches=[["t-0", 10, 19]]),
        ev(4.1, "commit", "a", ok=False, gen=1, error="timed out", batches=[["t-0", 10, 19]]),
        ev(5, "assigned", "b", partitions=["t-0"]),
        ev(5.1, "process", "b", tp="t-0", first=20, last=29, gen=2),
    ]
    assert analysis.in_doubt(landed_first)[0]["committed"] == [["t-0", 10, 19]]
