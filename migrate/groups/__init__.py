"""`groupshift groups`: list, describe, status and watch groups of both stores, and render the answers.

`listing` finds and reads groups (`migrate.schemes`), `describe` joins a group with the log's end
offsets, `status` judges a group's health from its commits, `watch` keeps the samples between
runs, `render` prints tables, JSON and CSV (also for `offsets` and `migrate`).
"""
