"""The base of every message struct of the wire, and the integer widths its fields are checked against.

`schema.py` (the group APIs) and `sasl_schema.py` (authentication) build their structs on these.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

Int8 = Annotated[int, msgspec.Meta(ge=-(2**7), le=2**7 - 1)]
Int32 = Annotated[int, msgspec.Meta(ge=-(2**31), le=2**31 - 1)]
Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]


class Message(msgspec.Struct, frozen=True):
    """Base of every request and response struct (and of their nested entries); build them with
    keywords (`kw_only` where a nullable field comes before a required one, as on the wire)."""
