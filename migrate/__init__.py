"""Inspection, offset export/import/reset and migration between the two schemes."""
