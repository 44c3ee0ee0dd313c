"""A consumer polling and committing in a thread, for tests of groups under faults.

loop = CommitLoop(consumer, delivered, "m1")   # (tp, offset) appended once committed
loop.start(); ...; loop.stop()                # stop() closes the consumer, raises its error
"""

from __future__ import annotations

import threading
import time

from pipeline.consumer import Consumer


class CommitLoop(threading.Thread):
    """poll + commit; records delivered only once their commit succeeded."""

    def __init__(self, consumer: Consumer, delivered: list, name: str):
        super().__init__(daemon=True, name=name)
        self.consumer, self.delivered = consumer, delivered
        self.stop_event = threading.Event()
        self.error: BaseException | None = None
        self.fetched_at: list[float] = []  # when each poll that returned records returned

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                got = self.consumer.poll(timeout_ms=50)
                if got:
                    self.fetched_at.append(time.monotonic())
                    batch = [(tp, r.offset) for tp, rs in got.items() for r in rs]
                    try:
                        self.consumer.commit()
                        self.delivered.extend(batch)
                    except Exception:  # noqa: BLE001 - CommitFailed: delivered again
                        pass
            self.consumer.close()
        except BaseException as exc:
            self.error = exc

    def stop(self) -> None:
        self.stop_event.set()
        self.join(30)
        assert not self.is_alive() and self.error is None, self.error
