"""psycopg_pool's log without passwords: its connection errors quote libpq, which may quote a DSN."""

from __future__ import annotations

import logging

from groundkit import dsn as groundkit_dsn


class _ScrubDsn(logging.Filter):
    """Blanks the DSNs' passwords in the pool's log records."""

    def __init__(self, dsns: tuple[str, ...]) -> None:
        super().__init__()
        self.dsns = dsns

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        for dsn in self.dsns:
            message = groundkit_dsn.scrub(dsn, message)
        record.msg = message
        record.args = None
        return True


def scrub_pool_log(*dsns: str) -> None:
    """Scrub the passwords of ``dsns`` from the pool's log, replacing any earlier such filter."""
    logger = logging.getLogger("psycopg.pool")
    for old in [f for f in logger.filters if isinstance(f, _ScrubDsn)]:
        logger.removeFilter(old)
    logger.addFilter(_ScrubDsn(dsns))
