from __future__ import annotations

from groundkit import Groundkit, WriteStatus


def test_put_and_search(community: Groundkit) -> None:
    gk = community
    r = gk.put_object("a", 1, "board_post", "open", "T0", "Pricing", "How to price a commission")
    assert r.status is WriteStatus.APPLIED
    hits = gk.search("t0", "pricing")
    assert [h.object_id for h in hits] == ["a"]
