"""At the default verbosity a command interrupted during a call into the Spark JVM says "aborted"
in one line: py4j's tracebacks of the interrupted call and of closing its connection are left out
(`cli.main._interrupted_py4j_call`), any other py4j error is not."""

from __future__ import annotations

import io
import logging

import pytest

from cli.main import _interrupted_py4j_call


@pytest.fixture
def stderr():
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.addFilter(_interrupted_py4j_call)
    root = logging.getLogger()
    root.addHandler(handler)
    yield out
    root.removeHandler(handler)


def _raise_and_log(logger: logging.Logger, message: str) -> None:
    try:
        raise BrokenPipeError(32, "Broken pipe")
    except BrokenPipeError:
        logger.exception(message)


def test_the_tracebacks_of_an_interrupted_call_are_left_out(stderr):
    # The messages as py4j 0.10.9 logs them: the first on the root logger, the second on its own.
    _raise_and_log(logging.getLogger(), "KeyboardInterrupt while sending command.")
    clientserver = logging.getLogger("py4j.clientserver")
    _raise_and_log(clientserver, "Exception occurred while shutting down connection")
    assert stderr.getvalue() == ""


def test_any_other_error_is_shown(stderr):
    _raise_and_log(logging.getLogger("py4j.java_gateway"), "An error occurred while calling o42.start")
    assert "An error occurred while calling o42.start" in stderr.getvalue()
    assert "BrokenPipeError" in stderr.getvalue()
