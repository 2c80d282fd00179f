"""spark_analysis/session.py: the driver JVM the session starts gets the flags it was given
(the tests' session asks for SMALL_RUN_JAVA_OPTIONS; a flag passed but not applied would leave
the suite paying C2's compiles without saying so); a small log's run compiles nothing, and the
shared session gets its own settings back after it."""

from __future__ import annotations

import uuid

from spark_analysis import session


def test_the_driver_jvm_runs_with_the_small_run_flags(spark):
    args = list(spark.sparkContext._jvm.java.lang.management.ManagementFactory
                .getRuntimeMXBean().getInputArguments())
    for flag in session.SMALL_RUN_JAVA_OPTIONS.split():
        assert flag in args, args


def _compiles(spark) -> int:
    """Classes Spark SQL compiled with Janino so far in this JVM (its codegen metrics)."""
    metrics = spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics
    return metrics.METRIC_COMPILATION_TIME().getCount()


def _unique_query(spark, k: int):
    """A query whose generated code no earlier one shares (the constant `k` is in its
    source), and the rows it must give."""
    from pyspark.sql import functions as F
    df = (spark.range(200).select((F.col("id") * k + 3).alias("a")).where(F.col("a") % 5 != 1)
          .groupBy((F.col("a") % 3).alias("m")).agg(F.sum("a").alias("s")).orderBy("m"))
    want: dict[int, int] = {}
    for i in range(200):
        a = i * k + 3
        if a % 5 != 1:
            want[a % 3] = want.get(a % 3, 0) + a
    return df, sorted(want.items())


def test_a_small_input_runs_interpreted_and_the_session_gets_its_own_values_back(spark):
    """Under SMALL_INPUT_CONF a query's own expressions are not compiled: a second query that
    differs only in a constant compiles nothing (what the first compiled, Spark's row joiner
    and orderings of its aggregation and sort, holds no constant of the query and is reused);
    in the session's own settings the same change compiles its stages again."""
    keys = list(session.SMALL_INPUT_CONF)
    before = {k: spark.conf.get(k, None) for k in keys}
    k = 1_000_003 + uuid.uuid4().int % 1_000_000
    restore = session.fit_to_input(spark, session.SMALL_INPUT_BYTES)
    try:
        assert {key: spark.conf.get(key) for key in keys} == session.SMALL_INPUT_CONF
        for i in range(2):
            compiled = _compiles(spark)
            df, want = _unique_query(spark, k + i)
            assert [(r["m"], r["s"]) for r in df.collect()] == want
        assert _compiles(spark) == compiled  # the second: nothing compiled
    finally:
        restore()
    assert {key: spark.conf.get(key, None) for key in keys} == before
    compiled = _compiles(spark)
    df, want = _unique_query(spark, k + 2)
    assert [(r["m"], r["s"]) for r in df.collect()] == want
    assert _compiles(spark) > compiled


def test_a_larger_input_leaves_the_session_as_it_is(spark):
    keys = list(session.SMALL_INPUT_CONF)
    before = {k: spark.conf.get(k, None) for k in keys}
    restore = session.fit_to_input(spark, session.SMALL_INPUT_BYTES + 1)
    assert {key: spark.conf.get(key, None) for key in keys} == before
    restore()
    assert {key: spark.conf.get(key, None) for key in keys} == before


def test_the_job_s_own_shuffle_partitions_are_kept_for_a_small_input(spark):
    key = "spark.sql.shuffle.partitions"
    before = spark.conf.get(key)
    restore = session.fit_to_input(spark, 100, shuffle_partitions=3)
    try:
        assert spark.conf.get(key) == before
        others = {k: v for k, v in session.SMALL_INPUT_CONF.items() if k != key}
        assert {k: spark.conf.get(k) for k in others} == others
    finally:
        restore()
    assert spark.conf.get(key) == before
