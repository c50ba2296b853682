"""Writing and reading files safely: atomic writes, result folders replaced whole, sha256 of files and
tensors, provenance (versions, machine, command), CSV/Parquet tables.

May import: errors, version, catalog, checks.
"""
