"""spark_analysis/lookup.py at a size where row groups matter: the steps of 300 000 events, as
the job writes them, come in many small row groups, and a pyarrow filter on one msg_id can
only need one of them (their min/max statistics exclude the rest)."""

from __future__ import annotations

import hashlib

import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from spark_analysis import lookup


def test_steps_come_in_small_row_groups_a_msg_id_filter_prunes_to_one(spark, tmp_path):
    from pyspark.sql import functions as F
    n = 300_000
    events = spark.range(n).select(
        F.unhex(F.md5(F.col("id").cast("string"))).alias("msg_id"),
        (F.lit(1_795_000_000_000_000_000) + F.col("id") * 1000).alias("t_ns"),
        F.lit(4).alias("rank"), F.lit("enqueued").alias("kind"), F.lit("leveret@a").alias("node"),
        F.concat(F.lit("orders-"), (F.col("id") % 8).cast("string")).alias("queue"),
        F.concat(F.lit("order-"), F.col("id").cast("string")).alias("message_id"))
    out = str(tmp_path / "steps")
    lookup.write_sorted(lookup.steps(events), out)
    groups = []  # (min, max) msg_id of every row group, in file order
    for f in sorted(ds.dataset(out, format="parquet").files):
        meta = pq.ParquetFile(f).metadata
        col = meta.schema.names.index("msg_id")
        for g in range(meta.num_row_groups):
            stats = meta.row_group(g).column(col).statistics
            assert meta.row_group(g).total_byte_size <= 2 * lookup.ROW_GROUP_BYTES
            groups.append((stats.min, stats.max))
    assert len(groups) >= 10
    assert all(a[1] <= b[0] for a, b in zip(groups, groups[1:]))  # sorted across groups
    mid = hashlib.md5(b"123456").digest()
    assert sum(lo <= mid <= hi for lo, hi in groups) == 1
    found = ds.dataset(out, format="parquet").to_table(filter=pc.field("msg_id") == mid)
    assert found.column("message_id").to_pylist() == ["order-123456"]
