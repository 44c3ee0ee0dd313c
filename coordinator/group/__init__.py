"""The pure group coordinator: Kafka's classic group state machine, no I/O, no clock of its own.

`coordinator.GroupCoordinator` is the entry point: typed requests and the time in, typed outputs
out (`messages`: responses, writes to persist, state changes). It composes `group_manager`
(groups, lookups, admin APIs), `membership_manager` (JoinGroup/SyncGroup/Heartbeat/LeaveGroup and
the timers) and `offset_manager` (OffsetCommit/OffsetFetch, expiry, deletion) over a shared
`context`; `metadata` and `state` are one group and its states. docs/coordinator-core.md
describes the behaviour.
"""
