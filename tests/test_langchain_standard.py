"""LangChain's own standard tests for retrievers (the ``langchain-tests`` package's
``RetrieversIntegrationTests``) against the real GroundkitRetriever on the embedded PostgreSQL:
none overridden, none marked xfail (its ``test_no_overrides_DO_NOT_OVERRIDE`` checks that).

The suite builds retrievers itself from ``retriever_constructor_params``, outside pytest's
fixtures, so an autouse fixture of this class puts a database with content in place first; its
async test runs under anyio (the plugin that comes with the MCP SDK)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from langchain_tests.integration_tests import RetrieversIntegrationTests

from groundkit import Groundkit
from groundkit.integrations.langchain import GroundkitRetriever

QUERY = "compost"


@pytest.mark.anyio
class TestGroundkitRetrieverStandard(RetrieversIntegrationTests):
    gk: Groundkit

    @pytest.fixture(autouse=True)
    def _world(self, dsn: str) -> Iterator[None]:
        """Five visible chunks that match the query, and two the reader may not see."""
        with Groundkit.connect(dsn) as gk:
            gk.put_member("reader", "T1")
            gk.put_space("open", "T0")
            gk.put_space("vault", "T3")
            for n in range(5):
                gk.put_object(f"post-{n}", 1, "board_post", "open", "T0", f"Compost note {n}",
                              f"compost heap number {n} is warm")
            for n in range(2):
                gk.put_object(f"vault-{n}", 1, "board_post", "vault", "T3", "Vault", "compost secrets")
            self.gk = gk
            yield

    @pytest.fixture
    def anyio_backend(self) -> str:
        return "asyncio"

    @property
    def retriever_constructor(self) -> type[GroundkitRetriever]:
        return GroundkitRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"client": self.gk, "reader_sub": "reader"}

    @property
    def retriever_query_example(self) -> str:
        return QUERY
