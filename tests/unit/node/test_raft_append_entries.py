"""skip_matching (actors/node/cluster.py): a follower skips the entries of an append_entries it
already holds, as Raft's receiver rule says, instead of pysyncobj 0.3.17's truncation of
everything after prevLogIdx (issue 15: "truncating already-applied log entries ... may have
diverged" logged CRITICAL on a fresh start, with no divergence at all)."""

from __future__ import annotations

from actors.node.cluster import skip_matching


def ae(prev, prev_term, entries, term=3, **kw):
    return {"type": "append_entries", "term": term, "commit_index": 9, "prevLogIdx": prev,
            "prevLogTerm": prev_term, "entries": entries, **kw}


def log(*terms, first=1):
    """Entries (command, index, term) from index `first`."""
    return [(b"c%d" % (first + i), first + i, t) for i, t in enumerate(terms)]


def test_entries_sent_again_are_skipped_and_nothing_is_truncated():
    mine = log(1, 3, 3, 3)                                # indexes 1..4, we applied them
    msg = ae(1, 1, log(3, 3, 3, first=2))                 # the leader rewound to 2, resends
    out = skip_matching(msg, mine)
    assert out["prevLogIdx"] == 4 and out["prevLogTerm"] == 3 and out["entries"] == []
    assert out["commit_index"] == 9 and out["term"] == 3  # the rest as it came


def test_a_heartbeat_behind_our_log_of_the_same_term_keeps_our_entries():
    out = skip_matching(ae(2, 3, []), log(3, 3, 3, first=2))  # we hold 2..4, applied
    assert (out["prevLogIdx"], out["prevLogTerm"], out["entries"]) == (4, 3, [])


def test_new_entries_after_the_ones_we_have_are_appended():
    mine = log(1, 3, 3)
    new = log(3, 3, 3, first=2)                           # 2, 3 ours; 4 new
    out = skip_matching(ae(1, 1, new), mine)
    assert (out["prevLogIdx"], out["prevLogTerm"]) == (3, 3)
    assert out["entries"] == new[2:]


def test_a_conflict_is_left_to_pysyncobj_from_the_first_conflicting_entry():
    mine = log(1, 2, 2, 2)                                # 3, 4 of an old leader (term 2)
    sent = [(b"c2", 2, 2), (b"x3", 3, 3)]                 # 2 matches, 3 conflicts
    out = skip_matching(ae(1, 1, sent), mine)
    assert (out["prevLogIdx"], out["prevLogTerm"]) == (2, 2)
    assert out["entries"] == sent[1:]                     # pysyncobj truncates from 3


def test_entries_of_an_older_term_beyond_what_was_sent_are_not_vouched_for():
    mine = log(1, 3, 2)                                   # 3 is of term 2, the sender's is 3
    out = skip_matching(ae(1, 1, [(b"c2", 2, 3)]), mine)
    assert (out["prevLogIdx"], out["entries"]) == (2, [])  # pysyncobj drops 3, as before


def test_messages_it_cannot_judge_go_as_they_came():
    stale = ae(2, 2, [])                                  # our entry at prev has another term
    assert skip_matching(stale, log(3, 3, first=2)) is stale
    mine = log(1, 3, 3)
    for msg in (ae(1, 1, [(b"x", 2, 4)]),                 # the first entry conflicts
                ae(1, 1, [], transmission="start", data=b""),  # a large entry in parts
                {"type": "append_entries", "term": 3, "commit_index": 1, "serialized": b""}):
        assert skip_matching(msg, mine) is msg
    assert skip_matching(ae(3, 3, []), log(3, first=3)) == ae(3, 3, [])  # nothing beyond
