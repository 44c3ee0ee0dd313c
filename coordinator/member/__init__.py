"""The member side of scheme three: what a consumer runs to be in a coordinator group.

`client.CoordinatorMember` (find the coordinator, join, sync, heartbeat, commit, rejoin),
`connection` (its pipelined connection to a node), `consumer_protocol` (the subscription and
assignment payloads), `wire_client` (a blocking one-connection client for admin tools and tests).
Assignors are in `coordinator.assignors`.
"""
