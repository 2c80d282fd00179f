"""spark_analysis: a second run of the job into the same OUT reads only the .events files that are
new or grew since the first, through file:// URIs (Hadoop's local file system) for input and
output; its output is the whole log's.

The proof that the unchanged files are not read again: between the runs their bytes are
overwritten with zeros, at the same length and modification time. A run that read them would
find no header and lose their events; the second run must still have every one of their
messages, with the verdicts a reader of the intact files gives.
"""

from __future__ import annotations

import os

import pyarrow.parquet as pq
import pytest

from analysis_workload import Sim, known_workload, planted_anomalies
from spark_analysis import lifecycle


def _files(root) -> dict[str, int]:
    return {os.path.join(d, n): os.path.getsize(os.path.join(d, n))
            for d, _, names in os.walk(root) for n in names if n.endswith(".events")}


def _run(spark, root, out) -> None:
    args = lifecycle.parse_args(["--events", f"file://{root}", "--out", f"file://{out}",
                                 "--no-progress"])
    assert lifecycle.run(args, spark=spark) == 0


@pytest.fixture(scope="module")
def runs(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("grown-events")
    out = tmp_path_factory.mktemp("incremental-out")
    # first run: a finished log of two nodes (x, y), and a live one (a, b) flushed half-way
    done = Sim(str(root), "leveret@x", "leveret@y")
    expect = dict(known_workload(done)["final_states"])
    done.close()
    live = Sim(str(root))
    expect.update(known_workload(live)["final_states"])
    live.chan.flush()
    live.queue.flush()
    unchanged = _files(root)
    _run(spark, root, out)
    first = pq.read_table(out / "manifest").to_pylist()

    # the live nodes' files grow, two new nodes (c, d) write files of their own
    planted = planted_anomalies(live)
    live.close()
    later = Sim(str(root), "leveret@c", "leveret@d")
    expect.update(known_workload(later)["final_states"])
    later.close()
    grown = {p for p, size in _files(root).items() if p in unchanged and size > unchanged[p]}
    new = set(_files(root)) - set(unchanged)
    kept = set(unchanged) - grown
    for path in kept:
        st = os.stat(path)
        with open(path, "r+b") as f:
            f.write(bytes(st.st_size))
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    _run(spark, root, out)
    return dict(expect=expect, planted=planted, first=first, grown=grown, new=new, kept=kept,
                manifest=pq.read_table(out / "manifest").to_pylist(),
                lifecycles={r["msg_id"]: r for r in pq.read_table(out / "lifecycles")
                            .to_pylist()},
                anomalies=pq.read_table(out / "anomalies").to_pylist(),
                events=pq.read_table(out / "events", columns=["file", "seq", "run_id"])
                .to_pylist(),
                report=(out / "report.html").read_text())


def _name(uri: str) -> str:
    return uri.rsplit("/", 1)[1]


def test_the_second_run_reads_only_the_new_and_the_grown_files(runs):
    assert len(runs["kept"]) == 2 and len(runs["grown"]) == 2 and len(runs["new"]) == 2
    assert {r["run"] for r in runs["first"]} == {1}
    by_run = {}
    for r in runs["manifest"]:
        assert r["path"].startswith("file:/") and r["valid"]
        by_run.setdefault(r["run"], set()).add(_name(r["path"]))
    assert by_run == {1: {os.path.basename(p) for p in runs["kept"]},
                      2: {os.path.basename(p) for p in runs["grown"] | runs["new"]}}
    assert "this run read 4 new or grown file(s)" in runs["report"]


def test_every_event_is_stored_once(runs):
    seen = [(e["run_id"], e["seq"]) for e in runs["events"]]
    assert len(seen) == len(set(seen))
    per_file = {}
    for e in runs["events"]:
        per_file[e["file"]] = per_file.get(e["file"], 0) + 1
    assert per_file == {_name(r["path"]): r["events"] for r in runs["manifest"]}
    for name, count in per_file.items():  # numbers 0..n-1 in each run, none missing
        seqs = sorted(e["seq"] for e in runs["events"] if e["file"] == name)
        assert seqs == list(range(count)), name


def test_the_whole_log_s_verdicts_including_the_files_not_read_again(runs):
    lc = runs["lifecycles"]
    for msg_id, state in runs["expect"].items():
        assert lc[msg_id]["final_state"] == state, (msg_id, lc[msg_id]["message_id"])
    nodes = {n for r in lc.values() for n in r["nodes"]}
    assert nodes == {"leveret@a", "leveret@b", "leveret@c", "leveret@d", "leveret@x",
                     "leveret@y"}
    found = sorted((a["kind"], a["msg_id"]) for a in runs["anomalies"])
    assert found == sorted(runs["planted"])
