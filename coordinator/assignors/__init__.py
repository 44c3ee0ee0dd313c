"""Partition assignors: range, roundrobin, sticky, cooperative-sticky, random, plug-ins."""
