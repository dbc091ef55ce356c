"""The operator console (``groundkit serve console``, the ``console`` extra; docs/console.md):
server-rendered pages of what a member sees and why, and the health, spend, quality and runs of
the index, for operators who log in with a console token."""

from groundkit.console.app import create_app
from groundkit.console.reads import ConsoleReads

__all__ = ["ConsoleReads", "create_app"]
