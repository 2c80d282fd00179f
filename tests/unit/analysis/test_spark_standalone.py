"""The lifecycle job on a real Spark standalone cluster: a master and two workers started from
pyspark's own jars on 127.0.0.1 (spark_standalone.py), the job run there by
`make analyze MASTER=spark://...`, unchanged (which passes the master to the job as
`spark-submit --master` does: the job's own `--master`; a spark-submit run was checked by hand,
docs/events.md), and its
lifecycles and anomalies held against a local run's on the same logs (two nodes' known workload
and planted anomalies, and logs with gaps: every join of the job runs).
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pyarrow.parquet as pq
import pytest

from analysis_workload import Sim, gap_workload, known_workload, planted_anomalies
from spark_standalone import StandaloneCluster, environment

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
VENV_BIN = os.path.join(REPO, ".venv", "bin")

pytestmark = pytest.mark.timeout(1200)  # two runs of the job and a cluster, on a busy machine


def _java_missing() -> bool:
    return not (shutil.which("java") or os.environ.get("JAVA_HOME"))


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    root = tmp_path_factory.mktemp("cluster-events")
    sim = Sim(str(root / "ab"))
    known_workload(sim)
    planted = planted_anomalies(sim)
    sim.close()
    gap_workload(str(root / "gaps"))
    return root, planted


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if _java_missing():
        pytest.skip("Java is missing: the standalone cluster runs on the JVM "
                    "(sudo apt-get install openjdk-17-jre-headless)")
    c = StandaloneCluster(tmp_path_factory.mktemp("standalone"), workers=2, cores=1,
                          memory="1g").start()
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def local_out(spark, logs, tmp_path_factory):
    """The same logs analysed in the tests' local SparkSession."""
    from spark_analysis import lifecycle

    out = tmp_path_factory.mktemp("local-out")
    args = lifecycle.parse_args(["--events", str(logs[0]), "--out", str(out), "--no-progress"])
    assert lifecycle.run(args, spark=spark) == 0
    return out


def _run(cmd: list[str], log) -> None:
    env = environment(PATH=VENV_BIN + os.pathsep + os.environ.get("PATH", ""))
    env.pop("PYSPARK_GATEWAY_PORT", None)  # (the tests' own session must not be taken for it)
    env.pop("PYSPARK_GATEWAY_SECRET", None)
    with open(log, "wb") as f:
        code = subprocess.run(cmd, cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, timeout=1200).returncode
    assert code == 0, log.read_text(errors="replace")[-4000:]


def _rows(out, table: str, key) -> list[dict]:
    return sorted(pq.read_table(out / table).to_pylist(), key=key)


def _same_output(out, local_out) -> None:
    by_id = lambda r: r["msg_id"]  # noqa: E731
    lc, expected = _rows(out, "lifecycles", by_id), _rows(local_out, "lifecycles", by_id)
    assert len(lc) == len(expected) > 0
    for got, want in zip(lc, expected):
        assert got == want, got["msg_id"]
    by_anomaly = lambda r: (r["kind"], r["msg_id"], r["queue"] or "")  # noqa: E731
    assert _rows(out, "anomalies", by_anomaly) == _rows(local_out, "anomalies", by_anomaly)
    by_gap = lambda r: (r["run_id"], r["kind"], r["seq_from"])  # noqa: E731
    assert _rows(out, "gaps", by_gap) == _rows(local_out, "gaps", by_gap)


def _apps(cluster) -> set[str]:
    """The job's applications the master knows (finished, or still being unregistered)."""
    state = cluster.state()
    return {a["id"] for a in state.get("completedapps", []) + state.get("activeapps", [])
            if a.get("name") == "leveret-lifecycle"}


def _ran_on_both_workers(cluster, before: set[str]) -> None:
    """One new application of the job finished, with an executor on each worker."""
    (app,) = _apps(cluster) - before
    for work in cluster.work_dirs:
        assert (work / app).is_dir(), (work, sorted(p.name for p in work.iterdir()))


def test_make_analyze_on_a_standalone_cluster_gives_the_local_output(
        cluster, logs, local_out, tmp_path):
    out = tmp_path / "cluster-out"
    before = _apps(cluster)
    _run(["make", "--no-print-directory", "analyze", f"MASTER={cluster.url}",
          f"EVENTS={logs[0]}", f"OUT={out}", "ANALYZE_ARGS=--no-progress --driver-memory 1g"],
         tmp_path / "make-analyze.log")
    _ran_on_both_workers(cluster, before)
    _same_output(out, local_out)
    found = sorted((a["kind"], a["msg_id"]) for a in pq.read_table(out / "anomalies")
                   .to_pylist() if a["kind"] != "unknown")
    planted = logs[1]
    assert [f for f in found if f in planted] == sorted(planted)

