"""The limits of both servers' HTTP transport (:mod:`groundkit.serve.transport` enforces them),
apart from it so that the CLI can name them without importing uvicorn (an optional extra)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

HEADER_TIMEOUT = 10.0
BODY_TIMEOUT = 30.0
MAX_CONNECTIONS = 500


class ServerLimits(BaseModel):
    """How long a client may take to send a request, and how many connections may be open."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    header_timeout: float = Field(default=HEADER_TIMEOUT, gt=0, le=3600,
                                  description="Seconds for a request's headers to arrive whole.")
    body_timeout: float = Field(default=BODY_TIMEOUT, gt=0, le=3600,
                                description="Seconds for a request's body to arrive whole, after its headers.")
    max_connections: int = Field(default=MAX_CONNECTIONS, ge=1, le=1_000_000,
                                 description="Connections open at once; more are answered 503 and closed.")
