"""The ``groundkit`` command line: a thin layer over the library."""

from groundkit.cli.main import app

__all__ = ["app"]
