"""Inspection, offset export/import/reset and migration between the two schemes' stores.

Four rooms, each importing only the ones before it:

* `migrate.schemes` — each store's groups read and written: `zk_store` (scheme one, Kafka 0.8's
  `/consumers`), `coordinator_store` (schemes two and three, `/groupshift/groups`), the shared
  `GroupView` (`model`), the pipelined reads (`zkio`) and the per-scheme writes (`writes`);
* `migrate.groups` — `groupshift groups`: list, describe, status, watch and the renderers;
* `migrate.offsets` — `groupshift offsets`: offset files, import and reset plans;
* `migrate.migration` — `groupshift migrate`: the record, the offline and live engines, the
  bridge, and the `--to kafka` target.
"""
