"""Languages (docs/bm25/analysis.md, "Languages"): a space names its language, an object overrides
it, each chunk is analyzed in its own, a query in every language of the spaces it searches, and
BM25's statistics stay per language and scoped to what the reader may see. Tested by behaviour on
text written here (no non-English collection could be had on these machines)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from groundkit import Groundkit, UnknownLanguage


def _ids(gk: Groundkit, reader: str, query: str, **kw: Any) -> list[str]:
    return [h.object_id for h in gk.search(reader, query, k=50, **kw)]


def _scores(gk: Groundkit, reader: str, query: str) -> dict[str, float]:
    return {h.object_id: h.score for h in gk.search(reader, query, k=50)}


@pytest.fixture
def two(gk: Groundkit) -> Groundkit:
    """An English space and a French one, a reader who sees both."""
    gk.put_member("ana", "T0")
    gk.put_space("atelier", "T0")
    gk.put_space("studio", "T0")
    assert gk.set_space_language("atelier", "french") == 0
    return gk


def test_a_chunk_is_analyzed_in_its_space_language(two: Groundkit, raw: psycopg.Connection[Any]) -> None:
    two.put_object("fr", 1, "board_post", "atelier", "T0", "", "Les chevaux mangeaient près du four")
    two.put_object("en", 1, "board_post", "studio", "T0", "", "The horses were eating near the kiln")
    lexemes = {r[0] for r in raw.execute("select u.lexeme from groundkit.chunks c, unnest(c.tsv) u"
                                         " where c.object_id = 'fr'").fetchall()}
    assert {"french|cheval", "french|mang", "french|four", "french|"} <= lexemes  # and its marker term
    assert raw.execute("select language from groundkit.chunks where object_id = 'fr'").fetchone() == ("french",)
    assert raw.execute("select language from groundkit.chunks where object_id = 'en'").fetchone() == (None,)
    # French stems: another form of the same words finds it
    assert _ids(two, "ana", "cheval manger") == ["fr"]
    assert _ids(two, "ana", "horse eat") == ["en"]


def test_each_chunk_is_scored_against_its_own_languages_terms(two: Groundkit) -> None:
    """'est' is a French stopword and an English word: the query 'est' finds the English chunk
    that holds it, never the French one, which holds it too."""
    two.put_object("fr", 1, "board_post", "atelier", "T0", "", "il est tard, le four est chaud")
    two.put_object("en", 1, "board_post", "studio", "T0", "", "times in est are off by an hour")
    assert _ids(two, "ana", "est") == ["en"]
    assert _ids(two, "ana", "four chaud") == ["fr"]  # English reads 'four' as a number word, French as an oven


def test_a_query_across_two_languages(two: Groundkit) -> None:
    two.put_object("fr", 1, "board_post", "atelier", "T0", "", "un émail céladon sur du grès")
    two.put_object("en", 1, "board_post", "studio", "T0", "", "a celadon glaze on stoneware")
    two.put_object("other", 1, "board_post", "studio", "T0", "", "throwing tall cylinders")
    assert set(_ids(two, "ana", "celadon")) == {"fr", "en"}
    assert set(_ids(two, "ana", "céladons stoneware")) == {"fr", "en"}  # one word of each language
    # phrases and exclusions hold in each chunk's own language
    assert _ids(two, "ana", '"émail céladon"') == ["fr"]
    assert _ids(two, "ana", "celadon -grès") == ["en"]
    # the snippet marks the French word in the French chunk
    (hit,) = [h for h in two.search("ana", "emails") if h.object_id == "fr"]
    assert hit.snippet is not None and "<mark>émail</mark>" in hit.snippet
    # a search narrowed to the English space is analyzed in English alone
    assert _ids(two, "ana", "celadon", space_ids=["studio"]) == ["en"]


def test_explain_match_reads_the_query_in_the_chunks_language(two: Groundkit, raw: psycopg.Connection[Any]) -> None:
    """groundkit explain --query says which terms a French chunk holds as search reads them."""
    two.put_object("fr", 1, "board_post", "atelier", "T0", "", "Les chevaux mangeaient près du four")
    two.put_object("en", 1, "board_post", "studio", "T0", "", "The horses were eating near the kiln")
    assert _ids(two, "ana", "cheval") == ["fr"]
    fr = raw.execute("select terms, matched from groundkit.explain_match('fr', 'cheval four')").fetchall()
    assert fr == [(["french|cheval", "french|four"], ["french|cheval", "french|four"])]
    en = raw.execute("select terms, matched from groundkit.explain_match('en', 'horse kiln')").fetchall()
    assert en == [(["hors", "kiln"], ["hors", "kiln"])]


def test_an_object_overrides_its_spaces_language(two: Groundkit, raw: psycopg.Connection[Any]) -> None:
    two.put_object("fr", 1, "board_post", "studio", "T0", "", "Les chevaux mangeaient",
                   metadata={"language": "french"})
    two.put_object("en", 1, "board_post", "atelier", "T0", "", "The horses were eating",
                   metadata={"language": "english"})
    assert _ids(two, "ana", "cheval", space_ids=["studio"]) == ["fr"]
    assert _ids(two, "ana", "horse", space_ids=["atelier"]) == ["en"]
    assert sorted(raw.execute("select space_id, language from groundkit.space_languages").fetchall()) == \
        [("atelier", "english"), ("studio", "french")]


def test_statistics_are_per_language_and_scoped(two: Groundkit) -> None:
    """N in a French term's IDF counts French chunks only: a French query scores the French
    chunks exactly as it would in a database of French alone, however much English there is
    (every chunk here has four words, so the average length does not move either); and content
    above the reader's tier changes nothing for it."""
    gk = two
    gk.put_member("t3", "T3")
    french = ["four bois cuisson grès", "four gaz cuisson porcelaine", "émail céladon grès bois",
              "tour potier argile grès", "séchage lent argile porcelaine"]
    for i, body in enumerate(french):
        gk.put_object(f"fr{i}", 1, "board_post", "atelier", "T0", "", body)
    before = _scores(gk, "ana", "cuisson grès bois")
    english = _scores(gk, "ana", "kiln wood")
    assert set(before) == {"fr0", "fr1", "fr2", "fr3"}
    for i in range(40):
        fuel = ["ash", "gas", "salt"][i % 3]
        gk.put_object(f"en{i}", 1, "board_post", "studio", "T0", "", f"kiln wood firing {fuel}")
    assert _scores(gk, "ana", "cuisson grès bois") == before
    # French content above the reader's tier: not counted in its statistics
    for i in range(40):
        gk.put_object(f"hidden{i}", 1, "board_post", "atelier", "T3", "", "grès grès bois cuisson")
    assert _scores(gk, "ana", "cuisson grès bois") == before
    assert _scores(gk, "t3", "cuisson grès bois") != before  # a reader who sees it counts it
    # and the English side's N is the English chunks': the first English scores were over none
    assert english == {}
    en = _scores(gk, "ana", "kiln wood")
    gk.put_object("fr-more", 1, "board_post", "atelier", "T0", "", "bois bois four chaud")
    assert _scores(gk, "ana", "kiln wood") == en


def test_the_term_bound_is_per_language(two: Groundkit) -> None:
    """A long English question keeps the same English terms whether or not the spaces it
    searches hold another language."""
    words = [f"zq{chr(97 + i // 26)}{chr(97 + i % 26)}x" for i in range(90)]
    for i in range(90):
        two.put_object(f"p{i}", 1, "board_post", "studio", "T0", "", " ".join(words[i:]))
    question = " ".join(words)
    english_only = [(h.object_id, h.score) for h in two.search("ana", question, k=20, space_ids=["studio"])]
    notice = two.last_query_notice
    assert notice is not None and "90 distinct terms in english" in notice
    both = [(h.object_id, h.score) for h in two.search("ana", question, k=20)]
    assert both == english_only
    assert two.last_query_notice is not None and "90 distinct terms in french" in two.last_query_notice


def test_changing_a_spaces_language_analyzes_its_objects_again(two: Groundkit) -> None:
    gk = two
    gk.put_object("a", 1, "board_post", "studio", "T0", "", "Les chevaux mangeaient")
    gk.put_object("b", 1, "board_post", "studio", "T0", "", "Ein Pferd", metadata={"language": "german"})
    before = gk.state_checksum()
    assert _ids(gk, "ana", "cheval") == []
    assert gk.set_space_language("studio", "french") == 1  # b names its own language
    assert _ids(gk, "ana", "cheval") == ["a"]
    assert _ids(gk, "ana", "pferde") == ["b"]
    assert gk.set_space_language("studio", "french") == 0
    assert gk.set_space_language("studio", None) == 1
    assert _ids(gk, "ana", "cheval") == []
    assert gk.state_checksum() == before
    gk.set_space_language("studio", "french")
    checksum = gk.state_checksum()
    gk.rebuild()
    assert gk.state_checksum() == checksum
    assert {a.language: a.current for a in gk.analysis_status()} == {"english": True, "french": True,
                                                                      "german": True}


def test_unknown_languages_are_refused(two: Groundkit, raw: psycopg.Connection[Any]) -> None:
    for bad in ("klingon", "French", "en", "", "simple; drop table x", "english_stem"):
        with pytest.raises(UnknownLanguage, match="unknown language"):
            two.set_space_language("studio", bad)
        with pytest.raises(UnknownLanguage, match="unknown language"):
            two.put_object("x", 1, "board_post", "studio", "T0", "", "text", metadata={"language": bad})
    with pytest.raises(UnknownLanguage):
        two.put_object("x", 1, "board_post", "studio", "T0", "", "text", metadata={"language": 7})
    with pytest.raises(psycopg.Error) as info:
        raw.execute("select groundkit.set_space_language('studio', 'klingon')")
    assert info.value.sqlstate == "GK026"
    assert "french" in two.languages() and "english" in two.languages() and "simple" not in two.languages()
    assert raw.execute("select count(*) from groundkit.objects where object_id = 'x'").fetchone() == (0,)


def test_a_database_that_names_no_language_is_english(gk: Groundkit, raw: psycopg.Connection[Any]) -> None:
    gk.put_member("ana", "T0")
    gk.put_space("studio", "T0")
    gk.put_object("a", 1, "board_post", "studio", "T0", "", "Les chevaux mangeaient")
    assert raw.execute("select count(*) from groundkit.chunks c, unnest(c.tsv) u"
                       " where strpos(u.lexeme, '|') > 0 or c.language is not null").fetchone() == (0,)
    assert raw.execute("select groundkit._languages_in_use()").fetchone() == ([],)
    assert [a.language for a in gk.analysis_status()] == ["english"]
