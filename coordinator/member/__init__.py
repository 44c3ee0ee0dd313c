"""The member side of the coordinator's schemes: what a consumer runs to be in a coordinator group.

`consumer_member.CoordinatorMember` (scheme three: assignors, listener order, commits, topic
watch) on `group_member.GroupMember` (generic: `discovery` finds the coordinator, `threads` runs
the heartbeat and group threads, `state` holds `MemberState` and its transitions) with
`classic.ClassicProtocol` (JoinGroup/SyncGroup/Heartbeat); scheme two's forms fill in the same
hooks: `server_assigned` (the draft: `CoordinatorMember(..., server_assigned=True)`) and
`incremental_member.IncrementalMember` (KIP-848). `connection` is its pipelined connection to a
node, `nodes` the nodes it knows, `wire_client` a blocking one-connection client for admin tools
and tests. The consumer protocol's payloads are in `coordinator.assignors.consumer_protocol`.
"""
