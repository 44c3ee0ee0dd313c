"""The wire contract (docs/protocol.md): one typed struct per request and response, the v0 codec, error codes.

`schema` defines what every API carries; `codec` turns frames into those structs and back (a
second codec, e.g. Kafka's binary protocol, maps onto the same structs); `errors` is
Kafka's numbers and the one table of how a client reacts to each. Nothing here does I/O or
knows about groups.
"""
