"""The Python API, for notebooks and scripts: the maintenance commands as functions that return
a :class:`Result` (the JSON report, the human summary, the exit code) instead of printing.

    import compactor
    result = compactor.plan("/var/lib/kafka/data", configs={"cleanup.policy": "compact"})
    result.exit_code, result.summary, result.report["partitions"][0]["explanation"]
    result.to_pandas()          # one row per partition line
    result                      # in Jupyter: the HTML report

They run exactly what the ``compactor`` commands run (same validation, lock, Spark session only
when there is work, same reports); errors are raised as :class:`compactor.errors.CompactorError`
(``.code``, ``.exit_code``, ``.path``, ``.position``, ``.base_offset``, ``.remedy``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas
    from pyspark.sql import SparkSession

    from compactor.maintenance.options import MaintenanceOptions


@dataclass(frozen=True)
class Result:
    """What a command produced.

    Attributes:
        command: ``plan``, ``compact``, ``retain``, ``run``, ``erase_apply`` or
            ``erase_verify``.
        report: the JSON report (``schemas/report.schema.json``).
        summary: the human summary the command line prints.
        exit_code: the command line's exit code (0 ok, 6 partial, ...).
    """

    command: str
    report: Mapping[str, Any]
    summary: str
    exit_code: int

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def partitions(self) -> list[Mapping[str, Any]]:
        """The partition lines (for ``run``: compaction's, then retention's)."""
        if self.report.get("command") == "run":
            return [*self.report["compaction"]["partitions"],
                    *self.report["retention"]["partitions"]]
        return list(self.report.get("partitions", []))

    def to_pandas(self) -> pandas.DataFrame:
        """One row per partition line (nested fields as they are)."""
        import pandas

        return pandas.DataFrame(self.partitions())

    def _repr_html_(self) -> str:
        from compactor.maintenance import html_report

        return html_report.render(self.report)

    def __str__(self) -> str:
        return self.summary


def _options(log_dir: str, *, now_ms: int | None, configs: Mapping[str, Any] | None,
             topic_configs: Mapping[str, Mapping[str, Any]] | None,
             topics: Sequence[str] | None, dry_run: bool, metadata_log_dir: str | None,
             server_properties: str | None, assume_kafka_defaults: bool,
             writer: str = "native", allow_replica_divergence: bool = False,
             assume_committed: bool = False,
             kafka_version: str | None = None) -> MaintenanceOptions:
    from compactor.maintenance.options import build_options

    return build_options(
        log_dir, now_ms=int(time.time() * 1000) if now_ms is None else now_ms,
        config_all=configs, config_topics=topic_configs, topics=topics or (), dry_run=dry_run,
        metadata_log_dir=metadata_log_dir, server_properties=server_properties,
        assume_kafka_defaults=assume_kafka_defaults, writer=writer,
        allow_replica_divergence=allow_replica_divergence, assume_committed=assume_committed,
        kafka_version=kafka_version)


def _round(log_dir: str, dry_run: bool, master: str | None, state_dir: str | None,
           **kw: Any) -> Result:
    from compactor.log import storage
    from compactor.maintenance import compact as compaction

    outcome = compaction.perform(_options(log_dir, dry_run=dry_run, **kw), master=master,
                                 state_dir=state_dir and storage.absolute(state_dir))
    return Result(outcome.result["command"], outcome.result, outcome.report.summary(),
                  outcome.report.exit_code)


def plan(log_dir: str, *, now_ms: int | None = None, configs: Mapping[str, Any] | None = None,
         topic_configs: Mapping[str, Mapping[str, Any]] | None = None,
         topics: Sequence[str] | None = None, master: str | None = None,
         state_dir: str | None = None, metadata_log_dir: str | None = None,
         server_properties: str | None = None, assume_kafka_defaults: bool = False,
         allow_replica_divergence: bool = False, assume_committed: bool = False,
         kafka_version: str | None = None) -> Result:
    """``compactor plan``: what a compaction round would do, with the numbers behind each
    decision; changes nothing. ``configs`` apply to every topic, ``topic_configs`` to one
    (Kafka's config names); the broker's ``server_properties`` and the cluster's metadata log
    are read as by the command."""
    return _round(log_dir, True, master, state_dir, now_ms=now_ms, configs=configs,
                  topic_configs=topic_configs, topics=topics,
                  metadata_log_dir=metadata_log_dir, server_properties=server_properties,
                  assume_kafka_defaults=assume_kafka_defaults,
                  allow_replica_divergence=allow_replica_divergence,
                  assume_committed=assume_committed,
                  kafka_version=kafka_version)


def compact(log_dir: str, *, now_ms: int | None = None,
            configs: Mapping[str, Any] | None = None,
            topic_configs: Mapping[str, Mapping[str, Any]] | None = None,
            topics: Sequence[str] | None = None, master: str | None = None,
            state_dir: str | None = None, metadata_log_dir: str | None = None,
            server_properties: str | None = None, assume_kafka_defaults: bool = False,
            writer: str = "native", allow_replica_divergence: bool = False,
            assume_committed: bool = False,
            kafka_version: str | None = None) -> Result:
    """``compactor compact``: one compaction round, in place, under the log dir's lock.
    ``writer`` is ``--writer``: ``"native"`` (numba kernels) or ``"pure"`` (the pure-Python
    reference; the same bytes, slower)."""
    return _round(log_dir, False, master, state_dir, now_ms=now_ms, configs=configs,
                  topic_configs=topic_configs, topics=topics,
                  metadata_log_dir=metadata_log_dir, server_properties=server_properties,
                  assume_kafka_defaults=assume_kafka_defaults, writer=writer,
                  allow_replica_divergence=allow_replica_divergence,
                  assume_committed=assume_committed,
                  kafka_version=kafka_version)


def retain(log_dir: str, *, now_ms: int | None = None,
           configs: Mapping[str, Any] | None = None,
           topic_configs: Mapping[str, Mapping[str, Any]] | None = None,
           topics: Sequence[str] | None = None, dry_run: bool = False,
           allow_aggressive: bool = False, state_dir: str | None = None,
           metadata_log_dir: str | None = None, server_properties: str | None = None,
           assume_kafka_defaults: bool = False, assume_committed: bool = False,
           kafka_version: str | None = None) -> Result:
    """``compactor retain``: Kafka's retention (time, size, log start offset); no Spark."""
    from compactor.log import storage
    from compactor.maintenance import retain as retention

    opts = _options(log_dir, now_ms=now_ms, configs=configs, topic_configs=topic_configs,
                    topics=topics, dry_run=dry_run, metadata_log_dir=metadata_log_dir,
                    server_properties=server_properties,
                    assume_kafka_defaults=assume_kafka_defaults,
                    assume_committed=assume_committed,
                    kafka_version=kafka_version)
    state = state_dir and storage.absolute(state_dir)
    catalog = retention.prepare(opts, allow_aggressive=allow_aggressive, state_dir=state)
    report, result = retention.perform(opts, catalog, state_dir=state)
    return Result("retain", result, report.summary(), report.exit_code)


def run(log_dir: str, *, now_ms: int | None = None, configs: Mapping[str, Any] | None = None,
        topic_configs: Mapping[str, Mapping[str, Any]] | None = None,
        topics: Sequence[str] | None = None, dry_run: bool = False,
        allow_aggressive: bool = False, master: str | None = None,
        state_dir: str | None = None, metadata_log_dir: str | None = None,
        server_properties: str | None = None, assume_kafka_defaults: bool = False,
        writer: str = "native", allow_replica_divergence: bool = False,
        assume_committed: bool = False,
        kafka_version: str | None = None) -> Result:
    """``compactor run``: retention, then compaction, per topic ``cleanup.policy``
    (``writer`` as for :func:`compact`). ``assume_committed`` is ``--assume-committed``: a
    partition without a high watermark on disk counts as committed up to its log end;
    ``kafka_version`` is ``--kafka-version``: the Kafka release whose rules to follow."""
    from compactor.log import storage
    from compactor.maintenance import run as maintenance_run

    outcome = maintenance_run.perform(
        _options(log_dir, now_ms=now_ms, configs=configs, topic_configs=topic_configs,
                 topics=topics, dry_run=dry_run, metadata_log_dir=metadata_log_dir,
                 server_properties=server_properties,
                 assume_kafka_defaults=assume_kafka_defaults, writer=writer,
                 allow_replica_divergence=allow_replica_divergence,
                 assume_committed=assume_committed,
                 kafka_version=kafka_version),
        master=master, allow_aggressive=allow_aggressive,
        state_dir=state_dir and storage.absolute(state_dir))
    parts = [outcome.compaction.summary()] if outcome.compaction else []
    summary = "\n".join([*parts, outcome.retention.summary(hints=outcome.compaction is None)])
    return Result("run", outcome.result, summary, outcome.exit_code)


def erase(action: str, log_dir: str, state_dir: str, *, now_ms: int | None = None,
          master: str | None = None, dry_run: bool = False,
          exclude_pending_deletes: bool = False, metadata_log_dir: str | None = None,
          server_properties: str | None = None, assume_kafka_defaults: bool = False,
          assume_committed: bool = False,
          kafka_version: str | None = None) -> Result:
    """``compactor erase apply`` or ``erase verify`` (``action``): the pending requests of the
    ledger in ``state_dir`` applied to, or verified on, every copy in the log dir."""
    from compactor.errors import ConfigError
    from compactor.log import storage
    from compactor.maintenance import erase as erasure
    from compactor.maintenance.options import build_options

    if action not in ("apply", "verify"):
        raise ConfigError(f"unknown erase action {action!r}; use 'apply' or 'verify'")
    report = erasure.perform(
        action, build_options(log_dir, now_ms=int(time.time() * 1000) if now_ms is None
                              else now_ms, dry_run=dry_run, metadata_log_dir=metadata_log_dir,
                              server_properties=server_properties,
                              assume_kafka_defaults=assume_kafka_defaults,
                              assume_committed=assume_committed,
                              kafka_version=kafka_version),
        storage.absolute(state_dir), master=master,
        exclude_pending_deletes=exclude_pending_deletes)
    return Result(report.command, report.to_dict(), report.summary(), report.exit_code)


def spark_session(master: str | None = None, *, state_dir: str | None = None) -> SparkSession:
    """A Spark session with delta-spark, as the commands start theirs (the active one when
    there is one): for reading the state dir's tables from a notebook or script::

        spark = compactor.spark_session()
        spark.read.format("delta").load("/var/lib/kafka-compactor/erasure_requests")

    ``state_dir`` on S3 gives the session Hadoop's S3A with the endpoint and credentials the
    commands use (its jars: ``python -m compactor.tools.build.jars --s3a``).

    Raises:
        SparkUnavailableError: no Java, or the jars were never fetched.
    """
    from compactor.log import storage
    from compactor.spark.session import get_spark

    options = storage.delta_options(state_dir) if state_dir else None
    spark = get_spark(master, object_store=options)
    if options is not None:
        from compactor.spark import delta

        delta.reach_object_store(spark, options)
    return spark
