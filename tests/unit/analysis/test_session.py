"""spark_analysis/session.py: the driver JVM the session starts gets the flags it was given
(the tests' session asks for SMALL_RUN_JAVA_OPTIONS; a flag passed but not applied would leave
the suite paying C2's compiles without saying so)."""

from __future__ import annotations

from spark_analysis import session


def test_the_driver_jvm_runs_with_the_small_run_flags(spark):
    args = list(spark.sparkContext._jvm.java.lang.management.ManagementFactory
                .getRuntimeMXBean().getInputArguments())
    for flag in session.SMALL_RUN_JAVA_OPTIONS.split():
        assert flag in args, args
