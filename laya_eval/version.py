"""The package version, importable by every room without importing the package's public names.

May import: nothing.
"""

__version__ = "0.1.0"
