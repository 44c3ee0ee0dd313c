"""A coordinator node's requests: each frame decoded and answered, or handed to the core.

`RequestDispatch` is the part of `CoordinatorNode` (coordinator/node/server.py) that serves one
request of a connection — the native listener's frames (`dispatch`) and the Kafka listener's
decoded requests (`handle`, `kafka=True`; coordinator/node/kafka_listener.py). A connection that
has not authenticated yet goes to the node's `authenticator` instead. ApiVersions, FindCoordinator,
DescribeCluster (and SASL's requests outside a handshake) are answered by the node itself, and
WatchGroup by its `watches` (coordinator/node/watches.py); while
ZooKeeper is away every group request gets COORDINATOR_NOT_AVAILABLE without reaching the core;
the others go to the core, whose outputs `CoreOutputs` (coordinator/node/outputs.py) applies.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from coordinator.node.authenticator import answer_outside
from coordinator.node.connection import Connection, Pending, error_of
from coordinator.wire import codec as P
from coordinator.wire.errors import COORDINATOR_NOT_AVAILABLE, REBALANCE_IN_PROGRESS
from coordinator.wire.schema import (
    NODE_APIS,
    DeleteGroupsResponse,
    DeleteGroupsResult,
    DescribeClusterBroker,
    DescribeClusterResponse,
    DescribeGroupsResponse,
    ErrorResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    ListGroupsResponse,
    Message,
    WatchGroupRequest,
    WatchGroupResponse,
)

log = logging.getLogger("coordinator.node.server")


def _now_ms() -> int:
    return int(time.time() * 1000)


def _unavailable_body(api: int, body: Any) -> Message:
    """COORDINATOR_NOT_AVAILABLE in the shape of `api`'s response (the node has lost ZooKeeper)."""
    code = COORDINATOR_NOT_AVAILABLE
    if api == P.DESCRIBE_GROUPS:
        return DescribeGroupsResponse(groups=[P.described_error(g, code) for g in body.groups])
    if api == P.LIST_GROUPS:
        return ListGroupsResponse(error_code=code)
    if api == P.DELETE_GROUPS:
        return DeleteGroupsResponse(
            results=[DeleteGroupsResult(group_id=g, error_code=code) for g in body.groups_names]
        )
    return P.precheck_error_body(api, body, code, "this node has lost ZooKeeper")


class RequestDispatch:
    """Serving one request (see the module docstring); a base of `CoordinatorNode`, whose state it uses."""

    def dispatch(self, conn: Connection, payload: bytes, t0: float) -> None:
        """Handle one frame of `conn` (called in order; never raises for anything a client sends)."""
        if conn.sasl is not None:  # not authenticated yet: the SASL handshake only
            self.authenticator.native(conn, payload, t0)
            return
        try:
            req = P.decode_request(payload)
        except P.RequestError as exc:
            conn.send(exc.id, exc.body())
            self.metrics.observe(P.API_NAMES.get(exc.api, "invalid"), time.perf_counter() - t0, exc.code)
            return
        except P.BadFrame as exc:
            self.metrics.inc("frames_refused")
            log.info("closing connection from %s: %s", conn.peer_host, exc)
            conn.close()
            return
        except Exception:  # never let a frame hurt the node: drop only this connection
            self.metrics.inc("frames_refused")
            log.exception("closing connection from %s: undecodable frame", conn.peer_host)
            conn.close()
            return
        pending = Pending(conn, req.id, req.api, t0)
        body = self.handle(pending, req.api, req.body, req.client_id)
        if body is not None:
            conn.send(req.id, body)
            self.metrics.observe(req.name, time.perf_counter() - t0, error_of(body))

    def handle(
        self, pending: Pending, api: int, body: Any, client_id: str, kafka: bool = False
    ) -> Message | None:
        """Serve one decoded request of `pending.conn` (either listener): the answer when it is
        immediate, or None when the core took it (it answers through `pending`, now or later).
        `kafka`: the request came from the Kafka listener, so FindCoordinator names Kafka endpoints.

        With `--authorizer acl` the request passes the node's ACLs first (`self.gate`,
        coordinator/node/authorization.py): refused whole, it is answered here and nothing else
        happens; refused in part, the allowed part is served and the answer completed."""
        gate = self.gate
        if gate is None or api == P.API_VERSIONS:
            return self._serve(pending, api, body, client_id, kafka)
        conn = pending.conn
        ruling = gate.rule(conn.principal, conn.peer_host, api, body, conn.grants)
        if ruling is None:
            return self._serve(pending, api, body, client_id, kafka)
        if ruling.request is None:
            return ruling.answer
        pending.amend = ruling.amend
        answer = self._serve(pending, api, ruling.request, client_id, kafka)
        if answer is not None and pending.amend is not None:
            answer, pending.amend = pending.amend(answer), None
        return answer

    def _serve(self, pending: Pending, api: int, body: Any, client_id: str, kafka: bool) -> Message | None:
        conn = pending.conn
        if api in NODE_APIS:
            return self._answer_here(api, body, kafka)
        if not self.serving or self._stopping:
            # ZooKeeper is away: answer without the core, so that nothing in it moves (no timer
            # fires, no parked request completes) until the node knows it still leads its shards.
            return _unavailable_body(api, body)
        if api == P.WATCH_GROUP:
            return self._watch(pending, body)
        conn.busy = pending
        try:
            outputs = self.core.handle(
                api,
                body,
                _now_ms(),
                client_id=client_id,
                client_host=conn.peer_host,
                request_token=pending,
                group_check=self.leadership.group_error,
            )
        except Exception:
            log.exception("the core failed on api %d from %s", api, conn.peer_host)
            conn.busy = None
            return ErrorResponse(error_code=-1, error_message="internal error")
        self._apply(outputs)
        # A heartbeat only moves deadlines later; while a timer is armed it will re-arm itself.
        if api != P.HEARTBEAT or self._timer is None:
            self._schedule_timer()
        return None

    def _watch(self, pending: Pending, body: WatchGroupRequest) -> Message | None:
        """WatchGroup (coordinator/node/watches.py): answered now, or parked until the group has
        news for the member."""
        gid = body.group_id
        code = self.leadership.group_error(gid) or self.core.heartbeat_due(
            gid, body.member_id, body.generation_id
        )
        if code == REBALANCE_IN_PROGRESS:
            return WatchGroupResponse(error_code=0, changed=True)
        if code or body.max_wait_ms <= 0:
            return WatchGroupResponse(error_code=code)
        self.watches.park(pending, body)
        return None

    def _answer_here(self, api: int, body: Any, kafka: bool) -> Message:
        """The APIs the node answers itself, without the core (ZooKeeper away or not)."""
        if api == P.API_VERSIONS:
            return P.api_versions_body()
        if api == P.FIND_COORDINATOR:
            return self._find_coordinator(body, kafka)
        if api == P.DESCRIBE_CLUSTER:
            return self._describe_cluster()
        return answer_outside(api)  # SaslHandshake, SaslAuthenticate: nothing to authenticate

    def _describe_cluster(self) -> DescribeClusterResponse:
        """The live nodes' native listeners, from the registrations this node watches (itself first
        known even before its watch reports it). Answered while ZooKeeper is away too: the last
        view is the best a member can get, and a member only uses it to find nodes."""
        me = self.config.node_id
        nodes = {n: (r.host, r.port) for n, r in dict(self.store.registrations).items()}
        nodes[me] = (self.host, self.port)
        return DescribeClusterResponse(
            error_code=0,
            cluster_id="groupshift",
            controller_id=me,
            brokers=[
                DescribeClusterBroker(broker_id=n, host=h, port=p) for n, (h, p) in sorted(nodes.items())
            ],
        )

    def _find_coordinator(self, body: FindCoordinatorRequest, kafka: bool = False) -> Message:
        if body.key_type != 0:
            return P.precheck_error_body(
                P.FIND_COORDINATOR,
                body,
                P.ErrorCode.INVALID_REQUEST,
                f"key_type {body.key_type} is not served",
            )
        if not self.serving:
            return P.precheck_error_body(
                P.FIND_COORDINATOR, body, COORDINATOR_NOT_AVAILABLE, "this node has lost ZooKeeper"
            )
        shard = self.leadership.shard_for(body.key)
        leader = self.store.leaders.get(shard)
        if leader is None or (leader.node == self.config.node_id and shard not in self.leadership.shards):
            # No leader, or our own leadership from before a session loss not yet reclaimed.
            return P.precheck_error_body(
                P.FIND_COORDINATOR, body, COORDINATOR_NOT_AVAILABLE, f"shard {shard} has no leader"
            )
        if kafka:
            if not leader.kafka_host:  # the leader has no Kafka listener
                return P.precheck_error_body(
                    P.FIND_COORDINATOR,
                    body,
                    COORDINATOR_NOT_AVAILABLE,
                    f"node {leader.node} has no Kafka listener",
                )
            return FindCoordinatorResponse(
                error_code=0, node_id=leader.node, host=leader.kafka_host, port=leader.kafka_port
            )
        return FindCoordinatorResponse(error_code=0, node_id=leader.node, host=leader.host, port=leader.port)
