"""The surfaces agents and apps read through: an MCP server (:mod:`groundkit.serve.mcp`, the
``mcp`` extra) and an HTTP API (:mod:`groundkit.serve.http`, the ``http`` extra), over one
:class:`~groundkit.serve.service.ReadService`. The reader's identity comes from the server's
configuration or a bearer token, never from a tool argument or a request body."""
