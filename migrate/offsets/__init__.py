"""`groupshift offsets`: export, import and reset a group's committed offsets.

`files` parses and writes offset files (pure), `reset` computes a reset plan (pure), `plans`
checks import and reset plans against the real group and log before `migrate.schemes.writes`
commits them.
"""
