"""A forked child that becomes `python -m MODULE ARGS`, then exits as the interpreter would.

    pid = os.fork()
    if pid == 0:
        become_main("cli", ["topics", "list"])  # never returns

The module runs as `__main__` the way `-m` runs it (`runpy`, `sys.argv[0]` its file); then, as an
interpreter does at exit, non-daemon threads are joined, exit functions run and the standard
streams flushed, and the process exits with the module's status: 0, `SystemExit`'s code (a message
printed to stderr, status 1), 130 after a KeyboardInterrupt, 1 after any other exception (its
traceback on stderr). Set the child's descriptors, directory, environment and signals first.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn


def become_main(module: str, args: list[str]) -> NoReturn:
    code = 1
    try:
        import runpy
        import threading

        sys.argv = [module, *args]  # runpy puts the module's file in argv[0]
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            code = exit_code(exc.code)
        except KeyboardInterrupt:
            code = 130
        except BaseException:
            import traceback

            traceback.print_exc()
            code = 1
        threading._shutdown()  # as the interpreter does on exit: non-daemon threads are joined
        import atexit

        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - a closed stream must not change the status
                pass
        os._exit(code & 0xFF)  # as the interpreter: sys.exit(-1) is status 255


def exit_code(code: object) -> int:
    """`SystemExit(code)`'s status as the interpreter computes it (a message: printed, 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1
