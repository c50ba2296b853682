"""Writing and reading files safely: atomic writes, result folders replaced whole, sha256 of files and
tensors, provenance (versions, machine, command, the sha256 and git commit of laya-eval's code), CSV/Parquet
tables.

May import: errors, version, catalog, checks.
"""
