"""Bad input: malformed DSNs, whose password no error may show (part of the bad-input section).

Each DSN of :data:`MALFORMED_DSNS` goes through the calls every command connects with
(:func:`groundkit.connect`, :func:`groundkit.migrate`, the scratch databases of the demo and the
evals): each must raise a :class:`~groundkit.errors.GroundkitError` (a ``ConfigError`` for a DSN
libpq cannot read, else ``DatabaseUnavailable``) whose message, traceback and exception chain
(``__cause__``, ``__context__``, a psycopg error's ``pgconn``) hold no piece of the password.
tests/test_dsn_leaks.py runs every CLI command against the same catalogue.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable

import groundkit
from groundkit.databases import fresh_database
from groundkit.errors import GroundkitError
from groundkit.gate.tap import Counts, Tap

# Every password below is made of these pieces (and delimiters): no error may show one.
SECRETS = ("Zx9SECRET", "Qk7HIDDEN")
_NOWHERE = "127.0.0.1:1"  # nothing listens there: connecting fails at once

MALFORMED_DSNS: tuple[tuple[str, str], ...] = (
    ("'%' not percent-encoded in a URI password", f"postgresql://postgres:Zx9SECRET%zz@{_NOWHERE}/groundkit"),
    ("%00 in a URI password", f"postgresql://postgres:Zx9SECRET%00Qk7HIDDEN@{_NOWHERE}/groundkit"),
    ("unterminated IPv6 host", "postgresql://postgres:Zx9SECRET@[::1/groundkit"),
    ("empty IPv6 host", "postgresql://postgres:Zx9SECRET@[]/groundkit"),
    ("port not a number", "postgresql://postgres:Zx9SECRET@127.0.0.1:notaport/groundkit"),
    ("port out of range", "postgresql://postgres:Zx9SECRET@127.0.0.1:99999/groundkit"),
    ("'@' in a URI password", f"postgresql://postgres:Zx9SECRET@Qk7HIDDEN@{_NOWHERE}/groundkit"),
    ("'/' in a URI password", f"postgresql://postgres:Zx9SECRET/Qk7HIDDEN@{_NOWHERE}/groundkit"),
    ("'?' in a URI password", f"postgresql://postgres:Zx9SECRET?Qk7HIDDEN@{_NOWHERE}/groundkit"),
    ("'#' in a URI password", f"postgresql://postgres:Zx9SECRET#Qk7HIDDEN@{_NOWHERE}/groundkit"),
    ("a space in a URI password", f"postgresql://postgres:Zx9SECRET Qk7HIDDEN@{_NOWHERE}/groundkit"),
    ("unknown URI parameter", f"postgresql://postgres:Zx9SECRET@{_NOWHERE}/groundkit?bogus=1"),
    ("bad sslmode", f"postgresql://postgres:Zx9SECRET@{_NOWHERE}/groundkit?sslmode=bogus"),
    ("bad connect_timeout", f"postgresql://postgres:Zx9SECRET@{_NOWHERE}/groundkit?connect_timeout=abc"),
    ("URI parameter without '='", f"postgresql://postgres:Zx9SECRET@{_NOWHERE}/groundkit?sslmode"),
    ("URI parameter with two '='", f"postgresql://postgres:Zx9SECRET@{_NOWHERE}/groundkit?a=b=c"),
    ("'%' not percent-encoded in the database", f"postgresql://postgres:Zx9SECRET@{_NOWHERE}/ground%zzkit"),
    ("two ports", f"postgresql://postgres:Zx9SECRET@{_NOWHERE}:2/groundkit"),
    ("unknown service", f"postgresql://postgres:Zx9SECRET@{_NOWHERE}/groundkit?service=gk_no_such_service"),
    ("'%' not percent-encoded in ?password=", f"postgresql://postgres@{_NOWHERE}/groundkit?password=Zx9SECRET%zz"),
    ("?password= then a bad parameter", f"postgresql://postgres@{_NOWHERE}/groundkit?password=Zx9SECRET&bogus"),
    ("a bad parameter then ?password=",
     f"postgresql://postgres@{_NOWHERE}/groundkit?sslmode=bogus&password=Zx9SECRET"),
    ("not a PostgreSQL URI", f"mysql://postgres:Zx9SECRET@{_NOWHERE}/groundkit"),
    ("not UTF-8 (a raw byte in argv)", f"postgresql://postgres:Zx9SECRET\udcff@{_NOWHERE}/groundkit"),
    ("key=value, port not a number", "host=127.0.0.1 port=1 password=Zx9SECRET port=abc"),
    ("key=value, unterminated quote", "host=127.0.0.1 port=1 password='Zx9SECRET"),
    ("key=value, escaped quote, unterminated", "host=127.0.0.1 port=1 password='Zx9SECRET\\' Qk7HIDDEN"),
    ("key=value, unquoted space in the password", "host=127.0.0.1 port=1 password=Zx9SECRET Qk7HIDDEN"),
    ("key=value, unknown keyword", "host=127.0.0.1 port=1 password=Zx9SECRET bogus=1"),
    ("key=value, no '='", "host=127.0.0.1 port=1 password Zx9SECRET"),
    ("key=value, bad sslmode", "host=127.0.0.1 port=1 password=Zx9SECRET sslmode=bogus"),
    ("key=value, '%' and an unterminated quote", "host=127.0.0.1 port=1 password = Zx9SECRET%zz dbname='groundkit"),
    ("well formed, no server at that socket", "postgresql://postgres:Zx9SECRET@/groundkit?host=/nonexistent"),
    ("well formed, nothing listens", f"postgresql://postgres:Zx9SECRET@{_NOWHERE}/groundkit"),
)


def leaks(text: str) -> list[str]:
    """The pieces of :data:`SECRETS` in ``text`` (also across a wrapped line)."""
    joined = text.replace("\n", "")
    return [s for s in SECRETS if s in text or s in joined]


def everything_shown(exc: BaseException) -> str:
    """All a traceback of ``exc`` prints, and the repr and attributes of each exception in its
    chain, with the password of a psycopg error's pgconn (which no message shows)."""
    text = "".join(traceback.format_exception(exc))
    todo: list[BaseException | None] = [exc]
    while todo:
        seen = todo.pop()
        if seen is None:
            continue
        pgconn = getattr(seen, "pgconn", None)
        password = pgconn.password if pgconn is not None else None
        text += repr(seen) + repr(vars(seen)) + (password or b"").decode("utf-8", "replace")
        todo += [seen.__cause__, seen.__context__]
    return text


def calls(dsn: str) -> dict[str, Callable[[], object]]:
    """The library calls the commands connect through."""
    return {"connect": lambda: groundkit.connect(dsn), "migrate": lambda: groundkit.migrate(dsn),
            "migration_state": lambda: groundkit.migration_state(dsn),
            "fresh_database": lambda: fresh_database(dsn, "groundkit_gate_bad_dsn")}


def problems_of(dsn: str) -> list[str]:
    """What is wrong with how the library answers ``dsn`` (nothing, when each call raises a
    GroundkitError that shows no piece of the password)."""
    problems = []
    for name, call in calls(dsn).items():
        try:
            call()
        except GroundkitError as exc:
            if shown := leaks(everything_shown(exc)):
                problems.append(f"{name}: {type(exc).__name__} shows {len(shown)} piece(s) of the password")
        except Exception as exc:
            shown = leaks(everything_shown(exc))
            problems.append(f"{name}: untyped {type(exc).__name__}" + (" showing the password" if shown else ""))
        else:
            problems.append(f"{name}: connected")
    return problems


def run_checks(tap: Tap) -> None:
    """One TAP check per malformed DSN (the DSN itself is not printed: its label is)."""
    for label, dsn in MALFORMED_DSNS:
        tap.tally("bad_inputs_tried")
        problems = problems_of(dsn)
        tap.check(not problems, f"bad input: DSN ({label}) -> typed error, no password shown", problems,
                  counts=Counts(bad_inputs_failed=1))
