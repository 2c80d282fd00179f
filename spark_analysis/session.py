"""The SparkSession of the job: local[*] unless told otherwise, this package shipped to the
Python workers.

Under spark-submit the session (master, driver memory) comes from spark-submit's options;
under `python -m spark_analysis.lifecycle` this module starts the JVM itself with the options
given here. Either way the same code runs on local[*] and on a cluster (`spark://HOST:PORT`):
shuffle partitions are Spark's, coalesced by adaptive query execution to the data's size and
the cluster's parallelism, unless `shuffle_partitions` fixes them. A run over a small log sets
its session for that while it runs (`fit_to_input`: nothing compiled, one partition per shuffle
unless fixed, no adaptive re-planning).
"""

from __future__ import annotations

import atexit
import logging
from collections.abc import Callable
import os
import shutil
import sys
import tempfile
import zipfile

# JVM flags for runs over small logs (the tests'): C2's optimising compiles and G1's concurrent
# threads cost more CPU than they save in jobs of seconds (measured: a third less CPU per run).
SMALL_RUN_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"

# Event logs up to this size (the tests': a few hundred events, ~75 bytes each) cost Spark more
# to compile than to run: Janino compiled ~200 classes per run of the job, ~4 CPU-s of ~12.
SMALL_INPUT_BYTES = 1 << 20
# Session settings for such a log: Spark's interpreted paths instead of generated code.
SMALL_INPUT_CONF = {
    "spark.sql.codegen.wholeStage": "false",  # each operator runs its own row loop
    # expressions and projections evaluated by Spark's interpreters (an internal setting of
    # Spark SQL: test_session checks that a query's expressions are not compiled under it)
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    # one task per shuffle, planned once: adaptive execution's re-planning at every stage
    # costs more than the coalescing it would do of data this small
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.shuffle.partitions": "1",
}

PACKAGE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(PACKAGE)


def _package_zip() -> str:
    """spark_analysis/ as a zip for SparkContext.addPyFile: executors import the reader from it
    (pickled functions and data source classes refer to it by module name)."""
    folder = tempfile.mkdtemp(prefix="leveret-analysis-")
    # Spark reads it again whenever an executor fetches it: kept until this process ends
    atexit.register(shutil.rmtree, folder, True)
    out = os.path.join(folder, "spark_analysis.zip")
    with zipfile.ZipFile(out, "w") as z:
        for name in sorted(os.listdir(PACKAGE)):
            if name.endswith(".py"):
                z.write(os.path.join(PACKAGE, name), f"spark_analysis/{name}")
    return out


def build(master: str | None = None, driver_memory: str = "4g", shuffle_partitions: int = 0,
          app_name: str = "leveret-lifecycle", log_level: str = "ERROR",
          driver_java_options: str = ""):
    """A SparkSession (the running one under spark-submit). `driver_java_options`: flags of
    the driver JVM when this process starts it (spark.driver.extraJavaOptions), e.g.
    SMALL_RUN_JAVA_OPTIONS."""
    # Python workers: this interpreter (with msgpack and pyarrow), this repository importable.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if REPO not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([REPO] + [p for p in paths if p])
    from pyspark.sql import SparkSession

    under_submit = "PYSPARK_GATEWAY_PORT" in os.environ  # spark-submit started the JVM
    builder = SparkSession.builder.appName(app_name)
    if master or not under_submit:
        builder = builder.master(master or "local[*]")
    if not under_submit:
        builder = builder.config("spark.driver.memory", driver_memory)
        if driver_java_options:
            builder = builder.config("spark.driver.extraJavaOptions", driver_java_options)
    builder = (builder
               .config("spark.ui.showConsoleProgress", "false")  # progress.py shows it instead
               .config("spark.ui.enabled", "false")
               .config("spark.sql.adaptive.enabled", "true")
               .config("spark.sql.adaptive.coalescePartitions.enabled", "true")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.ansi.enabled", "false")  # lenient with odd values in logs
               .config("spark.sql.execution.arrow.pyspark.enabled", "true"))
    if shuffle_partitions:
        builder = builder.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    spark.sparkContext.addPyFile(_package_zip())
    return spark


def fit_to_input(spark, input_bytes: int, shuffle_partitions: int = 0) -> Callable[[], None]:
    """Sets `spark` for a log of `input_bytes` bytes: SMALL_INPUT_CONF when it is at most
    SMALL_INPUT_BYTES, nothing otherwise; `shuffle_partitions` (the job's option), when given,
    is kept. Returns what puts the session's own values back (the session may be shared: the
    tests run every job in one)."""
    if input_bytes > SMALL_INPUT_BYTES:
        return lambda: None
    conf = {k: v for k, v in SMALL_INPUT_CONF.items()
            if not (shuffle_partitions and k == "spark.sql.shuffle.partitions")}
    before = {k: spark.conf.get(k, None) for k in conf}
    for k, v in conf.items():
        spark.conf.set(k, v)

    def restore() -> None:
        for k, v in before.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)
    return restore
