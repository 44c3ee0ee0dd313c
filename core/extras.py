"""Optional dependencies: the one place that imports them, naming the extra that provides each.

The core install (`pip install groupshift`) inspects, migrates and serves groups; Spark and the
experiments need extras. Code that needs one imports it through `require`:

    pyplot = require("matplotlib.pyplot", "experiments")
    # without the extra: GroupshiftError("this command needs the 'experiments' extra: pip install
    #                     'groupshift[experiments]' (matplotlib is missing)")
"""

from __future__ import annotations

import importlib
from types import ModuleType

from core.errors import GroupshiftError

# extra -> what it installs (pyproject.toml's [project.optional-dependencies] says the same).
EXTRAS = {
    "spark": ("pyspark", "pandas"),
    "experiments": ("testcontainers", "matplotlib"),
    "kafka": ("confluent-kafka",),
}


class MissingExtra(GroupshiftError):
    """An optional dependency is not installed; the message names the extra that installs it."""


def require(module: str, extra: str) -> ModuleType:
    """Import `module` (dotted names too) or raise `MissingExtra` naming `extra`."""
    if extra not in EXTRAS:
        raise ValueError(f"unknown extra {extra!r}; known: {', '.join(EXTRAS)}")
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        # exc.name is what is really missing (a dependency of the module, when the extra is broken).
        raise MissingExtra(
            f"this command needs the '{extra}' extra: pip install 'groupshift[{extra}]' "
            f"({exc.name or module} is missing)"
        ) from None
