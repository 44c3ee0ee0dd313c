"""Scheme three: the group coordinator (state machine, wire protocol, server, store, client)."""
