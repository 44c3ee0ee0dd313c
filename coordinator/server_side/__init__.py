"""Scheme two: the coordinator assigns the partitions itself (docs/scheme-two.md).

`assigned.ServerAssignedCoordinator` serves the draft's groups on the classic core: ServerJoinGroup
answered with the consumer id, the generation and the member's partitions; the node watches the
subscribed topics' sizes. `incremental_coordinator.IncrementalCoordinator` serves the incremental
form (KIP-848's ConsumerGroupHeartbeat) in front of it; its groups, epochs, target assignments and
stored record are `incremental_groups`, its commits, fetches and describes `incremental_admin`.
Nothing here imports the member side: what both sides share is
`coordinator.assignors.consumer_protocol`.
"""
