"""API tokens for the MCP and HTTP servers, and operator tokens for the console: made here,
stored as a SHA-256 only.

A token is ``gk_`` and 32 random bytes (URL-safe base64). Its hash is computed in Python, so the
token itself never reaches the database, its logs or its statistics. Member tokens
(``api_tokens``) and console tokens (``console_tokens``, revision 0029) live apart: neither kind
is ever accepted where the other is.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from datetime import UTC, datetime, timedelta

from groundkit.errors import InvalidArgument
from groundkit.session import Session, no_nul
from groundkit.steps import Op, scalar

PREFIX = "gk_"
_DURATION = re.compile(r"(\d+)([dhm])")
_UNITS = {"d": "days", "h": "hours", "m": "minutes"}


def token_hash(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


def parse_duration(text: str) -> timedelta:
    """``30d``, ``12h`` or ``90m`` as a timedelta."""
    found = _DURATION.fullmatch(text.strip())
    if found is None or int(found[1]) == 0:
        raise InvalidArgument(f"expected a duration such as 30d, 12h or 90m (got {text!r})")
    return timedelta(**{_UNITS[found[2]]: int(found[1])})


def create_token(session: Session, member_sub: str, expires: timedelta | None = None) -> str:
    """A new token for ``member_sub`` (never expiring without ``expires``). Shown once: only its
    hash is stored."""
    no_nul(member_sub=member_sub)
    token = PREFIX + secrets.token_urlsafe(32)
    expires_at = None if expires is None else datetime.now(UTC) + expires
    session._fetch(
        "select groundkit.create_token(member_sub => %(member_sub)s, token_hash => %(hash)s,"
        " expires_at => %(expires_at)s)",
        {"member_sub": member_sub, "hash": token_hash(token), "expires_at": expires_at},
    )
    return token


def revoke_tokens(session: Session, member_sub: str) -> int:
    """Revoke every token of ``member_sub``; returns how many were live."""
    no_nul(member_sub=member_sub)
    return int(session._scalar("select groundkit.revoke_tokens(member_sub => %(m)s)", {"m": member_sub}))


def token_member(session: Session, token: str) -> str | None:
    """The member ``token`` stands for; None when it is unknown, revoked or expired. What that
    member may see is decided at each read, by the permission predicate."""
    return session._run(token_member_steps(token))


def token_member_steps(token: str) -> Op[str | None]:
    """:func:`token_member` as an operation (:mod:`groundkit.steps`), for either driver."""
    if not token.startswith(PREFIX) or len(token) > 200:
        return None
    member = yield from scalar("select groundkit.token_member(token_hash => %(h)s)", {"h": token_hash(token)})
    return None if member is None else str(member)


def create_console_token(session: Session, operator: str, expires: timedelta | None = None) -> str:
    """A new operator token for ``groundkit serve console`` (the schema owner's call). It names
    an operator, not a member: it opens the console and reads as no member anywhere."""
    no_nul(operator=operator)
    token = PREFIX + secrets.token_urlsafe(32)
    expires_at = None if expires is None else datetime.now(UTC) + expires
    session._fetch(
        "select groundkit.create_console_token(operator => %(operator)s, token_hash => %(hash)s,"
        " expires_at => %(expires_at)s)",
        {"operator": operator, "hash": token_hash(token), "expires_at": expires_at},
    )
    return token


def revoke_console_tokens(session: Session, operator: str) -> int:
    """Revoke every console token of ``operator``; returns how many were live. An open console
    session of theirs ends at its next request."""
    no_nul(operator=operator)
    return int(session._scalar("select groundkit.revoke_console_tokens(operator => %(o)s)", {"o": operator}))


def console_operator(session: Session, token: str) -> str | None:
    """The operator a console token stands for; None when it is unknown, revoked, expired, or a
    member's token."""
    if not token.startswith(PREFIX) or len(token) > 200:
        return None
    return console_operator_by_hash(session, token_hash(token))


def console_operator_by_hash(session: Session, digest: bytes) -> str | None:
    """:func:`console_operator` for a token's SHA-256 (what a console session keeps, never the token)."""
    operator = session._scalar("select groundkit.console_operator(token_hash => %(h)s)", {"h": digest})
    return None if operator is None else str(operator)
