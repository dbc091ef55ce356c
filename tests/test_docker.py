"""groundkit on a PostgreSQL with pgvector in Docker (testcontainers), where an engine answers.

The same behaviour is covered on the embedded server by the rest of the suite; this checks the
docker-compose image (pgvector/pgvector) too, on machines that can run it.
"""

from __future__ import annotations

import pytest

import groundkit
from groundkit import Groundkit


def _docker_answers() -> bool:
    try:
        import docker

        docker.from_env(timeout=3).ping()
    except Exception:
        return False
    return True


@pytest.mark.docker
@pytest.mark.skipif(not _docker_answers(), reason="no Docker engine answers on this machine")
def test_migrate_and_search_on_pgvector_image() -> None:
    from testcontainers.postgres import PostgresContainer

    with PostgresContainer("pgvector/pgvector:pg17", driver=None) as pg:
        dsn = pg.get_connection_url()
        groundkit.migrate(dsn, gate=False)
        with Groundkit.connect(dsn) as gk:
            gk.put_member("ana", "T1")
            gk.put_space("commons")
            gk.put_object("p1", 1, "board_post", "commons", "T0", "Pricing", "How to price a commission")
            assert [h.object_id for h in gk.search("ana", "pricing")] == ["p1"]
            assert gk.conn.execute("select groundkit.pgvector_available() as ok").fetchone() == {"ok": True}
