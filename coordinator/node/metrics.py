"""Coordinator metrics in Prometheus' text format, and the tiny asyncio HTTP server for `/metrics`.

Counters and histograms are plain dicts updated on the request path (no locks: one event loop);
gauges are computed when scraped.

    metrics = Metrics()
    metrics.observe("Heartbeat", 0.0004, error_code=0)
    server = await serve_metrics(metrics, "127.0.0.1", 9100, gauges=lambda: {...})
"""

from __future__ import annotations

import asyncio
import bisect
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)

# Seconds; the coordinator's answers are sub-millisecond unless parked or written to ZooKeeper.
BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
)

LATENCY = "groupshift_coordinator_request_latency_seconds"
Gauges = dict[str, list[tuple[dict[str, str], float]]]


class Histogram:
    __slots__ = ("counts", "total", "count")

    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS) + 1)
        self.total = 0.0
        self.count = 0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(BUCKETS, seconds)] += 1
        self.total += seconds
        self.count += 1


class Metrics:
    """Request latency per API, errors by API and code, rebalances, connections, frames refused."""

    def __init__(self) -> None:
        self.latency: dict[str, Histogram] = {}
        self.errors: dict[tuple[str, int], int] = {}
        self.counters: dict[str, int] = {}

    def observe(self, api: str, seconds: float, error_code: int) -> None:
        h = self.latency.get(api)
        if h is None:
            h = self.latency[api] = Histogram()
        h.observe(seconds)
        if error_code:
            key = (api, error_code)
            self.errors[key] = self.errors.get(key, 0) + 1

    def inc(self, name: str, by: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + by

    def render(self, gauges: Gauges) -> str:
        out: list[str] = []
        for name, samples in gauges.items():
            out.append(f"# TYPE groupshift_coordinator_{name} gauge")
            for labels, value in samples:
                out.append(f"groupshift_coordinator_{name}{_labels(labels)} {_num(value)}")
        for name, value in sorted(self.counters.items()):
            out.append(f"# TYPE groupshift_coordinator_{name}_total counter")
            out.append(f"groupshift_coordinator_{name}_total {value}")
        out.append("# TYPE groupshift_coordinator_errors_total counter")
        for (api, code), value in sorted(self.errors.items()):
            out.append(f'groupshift_coordinator_errors_total{{api="{api}",code="{code}"}} {value}')
        out.append(f"# TYPE {LATENCY} histogram")
        for api, h in sorted(self.latency.items()):
            cumulative = 0
            for bound, n in zip((*BUCKETS, "+Inf"), h.counts, strict=True):
                cumulative += n
                le = bound if bound == "+Inf" else repr(float(bound))
                out.append(f'{LATENCY}_bucket{{api="{api}",le="{le}"}} {cumulative}')
            out.append(f'{LATENCY}_sum{{api="{api}"}} {h.total!r}')
            out.append(f'{LATENCY}_count{{api="{api}"}} {h.count}')
        return "\n".join(out) + "\n"


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{_escape(str(v))}"' for k, v in labels.items())
    return "{" + inner + "}"


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(float(v))


async def serve_metrics(
    metrics: Metrics, host: str, port: int, gauges: Callable[[], Gauges]
) -> asyncio.Server:
    """Answer `GET /metrics` (any other path: 404) with HTTP/1.0 semantics, one request a connection."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), 5)
            while True:  # skip headers
                h = await asyncio.wait_for(reader.readline(), 5)
                if h in (b"\r\n", b"\n", b""):
                    break
            parts = line.decode("latin-1").split()
            if len(parts) >= 2 and parts[0] in ("GET", "HEAD") and parts[1].split("?")[0] == "/metrics":
                body = metrics.render(gauges()).encode()
                status = "200 OK"
                ctype = "text/plain; version=0.0.4; charset=utf-8"
            else:
                body, status, ctype = b"not found\n", "404 Not Found", "text/plain"
            head = f"HTTP/1.0 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n\r\n"
            writer.write(head.encode() + (body if parts and parts[0] != "HEAD" else b""))
            await writer.drain()
        except (TimeoutError, OSError, UnicodeDecodeError):
            pass
        except Exception:  # never let a scrape hurt the node
            log.exception("metrics request failed")
        finally:
            writer.close()

    return await asyncio.start_server(handle, host, port)
