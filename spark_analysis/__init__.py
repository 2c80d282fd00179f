"""Leveret's lifecycle analysis: a PySpark job over the event logs of actors/events.py.

Modules, one job each: schema (the v2 layout), reader (files -> events DataFrame), lifecycles
(events -> one row per message), anomalies, latency, report (HTML + plots + summary), progress,
session (the SparkSession), lifecycle (the command line). See docs/events.md.
"""
