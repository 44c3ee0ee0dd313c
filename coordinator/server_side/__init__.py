"""Scheme two: the coordinator assigns the partitions itself (docs/scheme-two.md).

`assigned.ServerAssignedCoordinator` serves the draft's groups on the classic core: ServerJoinGroup
answered with the consumer id, the generation and the member's partitions; the node watches the
subscribed topics' sizes.
"""
