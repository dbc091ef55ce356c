"""DSNs: read before any connection, and connection errors that never show a password.

libpq echoes the part of a DSN it cannot parse (``invalid percent-encoded token: "<password>"``),
and a DSN that parses in a way its author did not mean (an ``@`` or ``/`` in a URI's password)
puts pieces of the password where the host, port or database name go, which connection errors
then show. So a DSN libpq cannot parse is refused with libpq's reason minus every fragment of the
DSN it quotes (a :class:`ConfigError`: connecting again will not help), and any other connection
error is shown with every piece of the DSN that may be a password replaced by ``***``.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote

import psycopg
from psycopg.conninfo import conninfo_to_dict

from groundkit import errors
from groundkit.errors import ConfigError, DatabaseUnavailable

_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_QUOTED = re.compile(r'"[^"]*"')  # libpq quotes each fragment of the DSN it echoes
_KEY_VALUE_PASSWORD = re.compile(r"password\s*=\s*(.*?)(?=\s+\w+\s*=|$)", re.IGNORECASE | re.DOTALL)
_URI_QUERY_PASSWORD = re.compile(r"[?&]password=([^&]*)", re.IGNORECASE)
_DELIMITERS = re.compile(r"[\s@/:?&#\[\]'\"\\%=]+")
_SHORTEST = 3  # shorter pieces are left alone: hiding every "pw" would garble messages, not protect


def parse(dsn: str) -> dict[str, str]:
    """``dsn``'s parameters as libpq reads them. A DSN libpq cannot read is a
    :class:`ConfigError` with libpq's reason, but no part of the DSN."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.Error as exc:
        # (one-character fragments are libpq's own: missing "=", matching "]")
        reason = scrub(dsn, _QUOTED.sub(lambda q: q[0] if len(q[0]) <= 3 else '"…"', str(exc).strip()))
    except UnicodeError:
        reason = "it is not UTF-8 text"
    else:
        return {key: str(value) for key, value in params.items()}
    # raised outside the handler: psycopg's error quotes the DSN, and would be the __context__
    raise ConfigError(f"the DSN is malformed ({reason}); it is not shown, as it may hold a password")


def secrets(dsn: str) -> list[str]:
    """Every piece of ``dsn`` that may be (part of) a password, longest first: the password libpq
    reads, and, read leniently, a URI's user info after its first ':' up to the last '@' before
    the host, its ``password=`` parameter, or a key=value password up to the next keyword; each
    also percent-decoded, and cut at the characters that end a URI's parts."""
    found = []
    try:
        password = conninfo_to_dict(dsn).get("password")
    except (psycopg.Error, UnicodeError):
        password = None
    if password:
        found.append(str(password))
    if (uri := _URI.match(dsn)) is not None:
        rest = dsn[uri.end():]
        authority = rest.split("?", 1)[0]
        at = authority.rfind("@") if "@" in authority else rest.rfind("@")
        userinfo = rest[:at] if at >= 0 else ""
        if ":" in userinfo:
            found.append(userinfo.split(":", 1)[1])
        found += _URI_QUERY_PASSWORD.findall(rest)
    else:
        found += _KEY_VALUE_PASSWORD.findall(dsn)
    pieces = set()
    for text in found:
        for form in (text, unquote(text, errors="replace")):
            pieces.add(form)
            pieces.update(_DELIMITERS.split(form))
    return sorted((p for p in pieces if len(p) >= _SHORTEST), key=len, reverse=True)


def scrub(dsn: str, text: str) -> str:
    """``text`` (an error about ``dsn``) with every piece of its password, and any password in a
    DSN it quotes, replaced by ``***``."""
    for piece in secrets(dsn):
        text = text.replace(piece, "***")
    return errors.scrub(text)


def connect(dsn: str, **kwargs: Any) -> psycopg.Connection[Any]:
    """``psycopg.connect(dsn, **kwargs)``: a :class:`ConfigError` for a DSN libpq cannot read, a
    :class:`DatabaseUnavailable` when connecting fails; neither holds the password, not even in
    ``__cause__`` or ``__context__``."""
    parse(dsn)
    try:
        conn: psycopg.Connection[Any] = psycopg.connect(dsn, **kwargs)
    except psycopg.Error as exc:
        message = scrub(dsn, str(exc).strip())
    else:
        return conn
    # Raised outside the handler: psycopg's error keeps the failed connection, password
    # included, in ``exc.pgconn``, and ``from None`` would still leave it in ``__context__``.
    raise DatabaseUnavailable(f"cannot connect to PostgreSQL: {message}")


async def connect_async(dsn: str, **kwargs: Any) -> psycopg.AsyncConnection[Any]:
    """:func:`connect` for ``psycopg.AsyncConnection``, with the same errors and the same care
    for the password."""
    parse(dsn)
    try:
        conn: psycopg.AsyncConnection[Any] = await psycopg.AsyncConnection.connect(dsn, **kwargs)
    except psycopg.Error as exc:
        message = scrub(dsn, str(exc).strip())
    else:
        return conn
    raise DatabaseUnavailable(f"cannot connect to PostgreSQL: {message}")
