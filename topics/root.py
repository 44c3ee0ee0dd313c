"""Where the log lives: `$GROUPSHIFT_DATA`, else `$GROUPSHIFT_HOME/data` — without pyarrow.

A command checks its log root before it reads anything, and imports `topics.log` (pyarrow) only
when it reads the log: `groups describe` of a group that does not exist imports neither.
"""

from __future__ import annotations

import os
from pathlib import Path

from core.errors import GroupshiftError

ENV_DATA = "GROUPSHIFT_DATA"


def default_root() -> Path:
    """`$GROUPSHIFT_DATA`, else `$GROUPSHIFT_HOME/data` (default `./.groupshift/data`).

    Checked as `--data` is: a path that exists must be a directory (`GroupshiftError` otherwise);
    one that does not exist yet is fine (`create` makes it, commands that only read see no topics).
    """
    root, source = Path(os.environ.get("GROUPSHIFT_HOME", ".groupshift")) / "data", "$GROUPSHIFT_HOME/data"
    if os.environ.get(ENV_DATA):
        root, source = Path(os.environ[ENV_DATA]), f"${ENV_DATA}"
    if root.exists() and not root.is_dir():
        raise GroupshiftError(
            f"the log root {root} (from {source}) is not a directory; "
            f"set ${ENV_DATA} or --data to a directory"
        )
    return root
