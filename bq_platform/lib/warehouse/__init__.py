"""Warehouses: DuckDB (local default) and BigQuery, behind one interface (:mod:`.base`)."""
