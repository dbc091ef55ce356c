"""The analysis (docs/bm25/analysis.md): code tokens by their whole and their parts, accents,
one function for index and query, versioned, and what `groundkit status` says of it."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

import groundkit
from groundkit import Groundkit
from tests.conftest import upgrade_revisions_only

# The token table of docs/bm25/analysis.md (and of issue 52): text in a post, its whole
# lexemes, its parts as lexemes, and words a member would type for the parts.
TOKENS: list[tuple[str, list[str], list[str], list[str]]] = [
    ("#include <stdio.h>", ["#include", "stdio.h"], ["includ", "stdio", "h"], ["include", "stdio"]),
    ("ERR_CONNECTION_REFUSED", ["err_connection_refused"], ["err", "connect", "refus"],
     ["connection", "refused"]),
    ("pg_stat_statements", ["pg_stat_statements"], ["pg", "stat", "statement"], ["stat", "statements"]),
    ("getUserName", ["getusername"], ["get", "user", "name"], ["user", "name"]),
    ("os.path.join", ["os.path.join"], ["os", "path", "join"], ["path", "join"]),
    ("/usr/lib/libpq.so", ["usr/lib/libpq.so"], ["usr", "lib", "libpq"], ["libpq", "usr"]),  # "so": a stopword
    ("0x1F", ["0x1f"], ["1f"], ["1f"]),
    ("E0425", ["e0425"], ["e", "0425"], ["0425"]),
    ("v2.0.1", ["v2.0.1"], ["v", "2", "0", "1"], ["2"]),
    ("C++", ["c++"], ["c"], ["c"]),
    ("C#", ["c#"], ["c"], ["c"]),
    ("F#", ["f#"], ["f"], ["f"]),
    (".NET", [".net"], ["net"], ["net"]),
    ("std::vector", ["std::vector"], ["std", "vector"], ["vector"]),
    ("Café naïve résumé", [], ["cafe", "naiv", "resum"], ["cafe", "naive", "resume"]),
]


def _lexemes(conn: psycopg.Connection[Any], text: str, language: str | None = None) -> set[str]:
    return {r[0] for r in conn.execute("select lexeme from unnest(groundkit._analyze(%s, %s))",
                                       (language, text)).fetchall()}


def test_token_table(gk: Groundkit, raw: psycopg.Connection[Any]) -> None:
    """Every row of the table: the analysis keeps the whole token and its parts, and a post
    holding it is found by the whole token and by each part, in the query syntax members use."""
    gk.put_member("ana", "T0")
    gk.put_space("board", "T0")
    for i, (text, wholes, parts, _typed) in enumerate(TOKENS):
        assert set(wholes) | set(parts) <= _lexemes(raw, text), text
        gk.put_object(f"p{i}", 1, "board_post", "board", "T0", "", f"Trouble with {text} again today")
    for i, (text, _wholes, _parts, typed) in enumerate(TOKENS):
        for query in [text, *typed]:
            found = [h.object_id for h in gk.search("ana", query, k=50)]
            assert f"p{i}" in found, (text, query, found)


def test_the_whole_token_ranks_above_its_parts_met_by_chance(gk: Groundkit) -> None:
    gk.put_member("ana", "T0")
    gk.put_space("board", "T0")
    pairs = [("ERR_CONNECTION_REFUSED", "an err on the connection, refused twice"),
             ("pg_stat_statements", "the pg team reads stat tables and statements"),
             ("getUserName", "get the user a name tag"),
             ("os.path.join", "the os lets a path join another"),
             ("std::vector", "the std answer is a vector"),
             ("E0425", "an e and a 0425 here")]
    for i, (token, chance) in enumerate(pairs):
        gk.put_object(f"whole{i}", 1, "board_post", "board", "T0", "", f"I hit {token} yesterday, help")
        gk.put_object(f"parts{i}", 1, "board_post", "board", "T0", "", chance)
    for i, (token, _chance) in enumerate(pairs):
        ranked = [h.object_id for h in gk.search("ana", token, k=50)]
        assert ranked.index(f"whole{i}") < ranked.index(f"parts{i}"), (token, ranked)


def test_one_analysis_for_index_and_query(raw: psycopg.Connection[Any], gk: Groundkit) -> None:
    """A chunk's tsvector is groundkit._analyze of its indexed text, and a query's terms are the
    same function's lexemes of the query."""
    gk.put_member("ana", "T0")
    gk.put_space("board", "T0")
    body = "Fix for ERR_CONNECTION_REFUSED in os.path.join on C++ and Café builds"
    gk.put_object("p", 1, "board_post", "board", "T0", "Title", body)
    (tsv,) = raw.execute("select tsv::text from groundkit.chunks where object_id = 'p'").fetchone() or (None,)
    (want,) = raw.execute("select groundkit._analyze(null, %s)::text", ("Title\n" + body,)).fetchone() or (None,)
    assert tsv == want
    terms = {r[0] for r in raw.execute("select term from groundkit.query_terms(%s)", (body,)).fetchall()}
    assert terms == _lexemes(raw, body)


def test_angle_brackets_are_text_and_urls_stay_whole(raw: psycopg.Connection[Any]) -> None:
    lex = _lexemes(raw, "#include <stdio.h> and List<String> from https://example.com/a/b or me@example.org")
    assert {"stdio.h", "stdio", "list", "string"} <= lex
    assert {"example.com/a/b", "me@example.org"} <= lex  # PostgreSQL's own URL and e-mail tokens
    assert "0.05" in _lexemes(raw, "significant at p<0.05")  # a plain decimal stays whole


def test_an_ellipsis_and_a_sign_are_prose_not_code(raw: psycopg.Connection[Any]) -> None:
    """Members write "so...then" and "+0.5": no whole lexeme is made of an ellipsis between words,
    and a number's sign does not make it a code token (a plain decimal is the parser's)."""
    lex = _lexemes(raw, "so... wait...then the dose rose by +0.5 mg, Hmm..okay")
    assert not any(".." in x for x in lex), lex
    assert {"wait", "dose", "+0.5", "hmm", "okay"} <= lex
    assert {".bashrc", "bashrc"} <= _lexemes(raw, "see ~/.bashrc")  # a leading dot still is one


def test_accents_are_folded_before_the_stemmer(gk: Groundkit) -> None:
    gk.put_member("ana", "T0")
    gk.put_space("board", "T0")
    gk.put_object("cafe", 1, "board_post", "board", "T0", "", "Café naïve résumé of the façade")
    for query in ("cafe", "Café", "naive", "resume", "facade", "résumés"):
        assert [h.object_id for h in gk.search("ana", query)] == ["cafe"], query
    # the snippet marks the accented word the query found
    (hit,) = gk.search("ana", "cafe")
    assert hit.snippet is not None and "<mark>Café</mark>" in hit.snippet


def test_status_says_when_the_index_needs_a_rebuild(gk: Groundkit, dsn: str) -> None:
    """The analysis's version and each language's digest, recorded when the index was built,
    against the analysis now; a rebuild records the new state."""
    gk.put_member("ana", "T0")
    gk.put_space("board", "T0")
    gk.put_object("p", 1, "board_post", "board", "T0", "", "reading the running logs")
    (english,) = gk.analysis_status()
    assert english.current and english.language == "english" and english.version == "gk-analysis-2"
    assert english.folds_accents
    # A stemmer that changed (as a PostgreSQL upgrade can change one): here the English
    # configuration stops stemming ASCII words.
    gk.conn.execute("alter text search configuration groundkit.english alter mapping for asciiword with simple")
    (english,) = gk.analysis_status()
    assert not english.current and english.digest != english.built_digest
    assert [h.object_id for h in gk.search("ana", "running")] == []  # 'running' no longer meets 'run'
    status = _flat(_cli("status", dsn=dsn).stdout)
    assert "analysis english (gk-analysis-2, accents folded): its configuration's output on the probe words" \
           " changed" in status
    assert json.loads(_cli("status", "--json", dsn=dsn).stdout)["analysis"][0]["current"] is False
    gk.rebuild()
    (english,) = gk.analysis_status()
    assert english.current
    assert [h.object_id for h in gk.search("ana", "running")] == ["p"]
    assert "analysis english (gk-analysis-2, accents folded): current" in _flat(_cli("status", dsn=dsn).stdout)


def test_an_index_from_before_the_analysis_is_reported_and_rebuilt(empty_dsn: str) -> None:
    """A database that held chunks when revision 0030 came was analyzed by gk-analysis-1
    (to_tsvector alone): status asks for a rebuild, and after it the index is current."""
    upgrade_revisions_only(empty_dsn, "0029")
    with psycopg.connect(empty_dsn, autocommit=False) as conn:
        conn.execute("insert into groundkit.objects (object_id, version, state, content_type, space_id,"
                     " tier_visibility, title, owner_only, metadata, content_hash, log_seq)"
                     " values ('old', 1, 'live', 'board_post', 's', 'T0', '', false, '{}', 'h', 1)")
        conn.execute("insert into groundkit.chunks (object_id, object_version, chunk_seq, content, tsv, doc_len,"
                     " chunker_version) values ('old', 1, 0, 'Café', to_tsvector('café'), 1, 'gk-text-1')")
        conn.commit()
    groundkit.migrate(empty_dsn, gate=False)
    with Groundkit.connect(empty_dsn) as gk:
        (english,) = gk.analysis_status()
        assert not english.current and english.built_version == "gk-analysis-1" and english.built_digest is None
        status = _flat(_cli("status", dsn=empty_dsn).stdout)
        assert ("the index was analyzed by gk-analysis-1, this groundkit analyzes with gk-analysis-2: groundkit "
                "rebuild analyzes it again") in status
        gk.rebuild()
        assert all(a.current for a in gk.analysis_status())


def test_without_unaccent_migrate_warns_and_accents_are_kept(server_dsn: str, empty_dsn: str) -> None:
    """A server without the unaccent extension (here: PostgreSQL 18 told to look for extensions
    in an empty directory, so contrib is missing as on a server without it): migrate warns and
    goes on, search works with accents kept, and status says so."""
    name = conninfo_to_dict(empty_dsn)["dbname"]
    with tempfile.TemporaryDirectory() as nowhere, psycopg.connect(server_dsn, autocommit=True) as admin:
        version = admin.execute("select current_setting('server_version_num')::int").fetchone()
        assert version is not None
        if version[0] < 180000:  # extension_control_path is PostgreSQL 18's
            pytest.skip("needs PostgreSQL 18's extension_control_path")
        Path(nowhere).chmod(0o755)
        admin.execute(sql.SQL("alter database {} set extension_control_path = {}").format(
            sql.Identifier(str(name)), sql.Literal(nowhere)))
        with psycopg.connect(empty_dsn, autocommit=True) as conn:
            assert conn.execute("select count(*) from pg_available_extensions where name = 'unaccent'"
                                ).fetchone() == (0,)
        # (the gate's sections are not what this test is about)
        migrate = _cli("migrate", "--skip-gate", "--reason", "test: a server without unaccent", dsn=empty_dsn)
        assert migrate.returncode == 0, migrate.stderr
        assert "warning: groundkit: this server has no unaccent extension (PostgreSQL contrib); accents are kept" \
            in _flat(migrate.stderr)
        with Groundkit.connect(empty_dsn) as gk:
            gk.put_member("ana", "T0")
            gk.put_space("board", "T0")
            gk.put_object("cafe", 1, "board_post", "board", "T0", "", "Café au lait, pg_stat_statements")
            assert [h.object_id for h in gk.search("ana", "café")] == ["cafe"]
            assert [h.object_id for h in gk.search("ana", "cafe")] == []  # accents kept
            assert [h.object_id for h in gk.search("ana", "pg_stat_statements")] == ["cafe"]
            (english,) = gk.analysis_status()
            assert english.current and english.folds_accents is False
        status = _flat(_cli("status", dsn=empty_dsn).stdout)
        assert "english (gk-analysis-2, accents kept: this server has no unaccent): current" in status


def _flat(text: str) -> str:
    """Text with its runs of white space as one space (rich wraps long lines)."""
    return " ".join(text.split())


def _cli(*args: str, dsn: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "from groundkit.cli import app; app()", *args, "--dsn", dsn],
                          capture_output=True, text=True, timeout=300)
