"""groundkit's version (its own module: migrate records it without importing the package's API)."""

__version__ = "0.1.0"
