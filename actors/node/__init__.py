"""The node process: the root supervisor (node.py), the metadata actor that is the sole writer of
definitions (metadata.py, durable ones in definitions.py) and, in a cluster, its Raft log
(metadata_cluster.py, cluster.py, raft_storage.py); cluster_run.py launches a local cluster of
nodes (make run-cluster)."""
