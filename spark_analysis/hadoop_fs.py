"""The job's file-system calls on the driver, through Hadoop's FileSystem in the Spark JVM: what
the DataFrame readers and writers do not cover (qualifying a path, writing the report's bytes,
asking whether an output exists). So `file://`, `hdfs://`, `s3a://` and plain paths (the
cluster's default file system) all work the same; nothing here touches the driver's local disk
through Python.
"""

from __future__ import annotations


def _fs_and_path(spark, uri: str):
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(uri)
    return path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), path


def qualify(spark, uri: str) -> str:
    """`uri` made absolute on its file system: a plain path resolves against the default file
    system (fs.defaultFS: the local disk unless the cluster says otherwise) and its working
    directory, so executors on other hosts get the same place."""
    fs, path = _fs_and_path(spark, uri)
    return fs.makeQualified(path).toString()


def join(base: str, *parts: str) -> str:
    return "/".join([base.rstrip("/")] + [p.strip("/") for p in parts])


def exists(spark, uri: str) -> bool:
    fs, path = _fs_and_path(spark, uri)
    return bool(fs.exists(path))


def delete(spark, uri: str) -> None:
    """Removes `uri` (recursively); nothing when it is not there."""
    fs, path = _fs_and_path(spark, uri)
    fs.delete(path, True)


def write_bytes(spark, uri: str, data: bytes) -> None:
    """Creates (or replaces) the file `uri` holding `data`; parent directories as needed."""
    fs, path = _fs_and_path(spark, uri)
    out = fs.create(path, True)
    try:
        out.write(bytearray(data))
    finally:
        out.close()


def local_path(uri: str) -> str | None:
    """The local path of a `file:` URI (for messages), None for other file systems."""
    if uri.startswith("file:"):
        rest = uri[len("file:"):]
        return "/" + rest.lstrip("/") if rest.startswith("/") else rest
    return None
