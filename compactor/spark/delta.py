"""Delta Lake inside Spark (delta-spark): the jars every session of the tool loads and the
settings that make the ledger and the run history ``spark.read.format("delta")`` tables.

The jars come from Maven Central once, at set-up (``python -m compactor.tools.build.jars``, which
``make`` runs: ``compactor/spark/pom.xml`` pins them); a session then puts them on its
classpath from that folder, with no network. A state dir on S3 adds Hadoop's S3A connector
(its own folder: the AWS SDK is 690 MB, so only sessions that need it load it).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from compactor.errors import SparkUnavailableError
from compactor.log import storage
from compactor.remote import tier

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: the pinned releases (compactor/spark/pom.xml): delta-spark 4.4.x is built for Spark 4.2
DELTA_VERSION = "4.4.0"
#: Hadoop's S3A must be the release of pyspark's own Hadoop client (hadoop-client-api-3.5.0)
HADOOP_VERSION = "3.5.0"
#: the profiles of compactor/spark/pom.xml and their folder names
PROFILES = {"delta": f"delta-{DELTA_VERSION}", "s3a": f"hadoop-aws-{HADOOP_VERSION}",
            "tier": f"kafka-tier-{tier.KAFKA_VERSION}"}
POM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pom.xml")

#: Delta's SQL extension (MERGE, DESCRIBE HISTORY, VERSION AS OF) and catalog; the
#: partitions delta-spark rebuilds a table's state in: 50 by default, for tables of many
#: thousand files, where the state dir's tables hold a few (`compactor optimize`): with 2, an
#: `erase apply` on a small log dir took 4.4 s instead of 7.2; and no per-commit checksum file
#: (`_delta_log/N.crc`, optional in the protocol, which delta-rs does not write): computing
#: it rebuilds the table's state after every commit
SESSION_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.databricks.delta.writeChecksumFile.enabled": "false",
}

HOW_TO_FETCH = ("run `python -m compactor.tools.build.jars` once with access to Maven Central "
                "(`make` does): it puts the pinned jars in that folder")


def jars_home() -> str:
    """Where the jars are: ``COMPACTOR_JARS_HOME``, else in the Python environment next to
    its pyspark (``<prefix>/share/kafka-compactor``)."""
    return os.environ.get("COMPACTOR_JARS_HOME") or os.path.join(
        sys.prefix, "share", "kafka-compactor")


def folder(profile: str) -> str:
    return os.path.join(jars_home(), PROFILES[profile])


def jars(profile: str = "delta") -> list[str]:
    """The jars of ``profile``, sorted.

    Raises:
        SparkUnavailableError: they were never fetched.
    """
    where = folder(profile)
    fetched = storage.exists(storage.join(where, ".fetched"))
    found = sorted(storage.join(where, n) for n in storage.list_dir(where)
                   if n.endswith(".jar")) if fetched else []
    if not found:
        raise SparkUnavailableError(
            f"the {profile} jars are not installed in {folder(profile)}", remedy=HOW_TO_FETCH)
    return found


def session_conf(*, object_store: Mapping[str, str] | None = None,
                 local: bool = False) -> dict[str, str]:
    """The settings a session of the tool starts with: the jars on its classpath, Delta's
    extension and catalog, and with ``object_store`` (:func:`s3a_conf`'s input) S3A for the
    state dir.

    A cluster's executors get the jars through ``spark.jars`` (Spark serves them; each
    executor fetches its copy). In local mode (``local``) the driver's JVM is the executor:
    the jars go on that JVM's own classpath (``spark.driver.extraClassPath``), since through
    ``spark.jars`` its executor would copy every jar into the session's temp dir
    (``Executor.updateDependencies``, no fetch cache in local mode), the AWS SDK's 690 MB
    included: about 3 s and 690 MB of disk per session (docs/benchmarks.md).

    Raises:
        SparkUnavailableError: the jars were never fetched.
    """
    # S3A whenever it was fetched: a JVM's classpath is fixed when it starts, and a session
    # (a notebook's, a test run's) may reach a state dir on S3 after its first command
    conf = {**classpath_conf(local=local, s3a=object_store is not None), **SESSION_CONF}
    if object_store is not None:
        conf.update(s3a_conf(object_store))
    return conf


def classpath_conf(*, local: bool, s3a: bool = False) -> dict[str, str]:
    """Where a new session's JVM finds the tool's jars (:func:`session_conf`): delta-spark's,
    and S3A's when ``s3a`` or when it was fetched."""
    s3a = s3a or storage.exists(storage.join(folder("s3a"), ".fetched"))
    paths = jars("delta") + (jars("s3a") if s3a else [])
    if local:
        return {"spark.driver.extraClassPath": os.pathsep.join(paths)}
    return {"spark.jars": ",".join(paths)}


def s3a_conf(options: Mapping[str, str]) -> dict[str, str]:
    """Hadoop's S3A settings from the ``deltalake`` storage options of the state dir
    (:func:`compactor.log.storage.delta_options`): the same endpoint and credentials, for
    ``s3://`` paths too. Spark redacts the keys in its UI and logs
    (``spark.redaction.regex``)."""
    conf = {"spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
            "spark.hadoop.fs.s3a.path.style.access": "true",
            # Hadoop caches a file system per bucket with the settings of its first use: a
            # session that reaches another endpoint later (reach_object_store) must not get
            # the cached one
            "spark.hadoop.fs.s3.impl.disable.cache": "true",
            "spark.hadoop.fs.s3a.impl.disable.cache": "true"}
    pairs = {"AWS_ACCESS_KEY_ID": "access.key", "AWS_SECRET_ACCESS_KEY": "secret.key",
             "AWS_SESSION_TOKEN": "session.token", "AWS_ENDPOINT_URL": "endpoint",
             "AWS_REGION": "endpoint.region"}
    for option, key in pairs.items():
        if options.get(option):
            conf[f"spark.hadoop.fs.s3a.{key}"] = options[option]
    if options.get("AWS_SESSION_TOKEN"):
        conf["spark.hadoop.fs.s3a.aws.credentials.provider"] = (
            "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider")
    if options.get("AWS_ALLOW_HTTP") == "true":
        conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = "false"
    if options.get("AWS_VIRTUAL_HOSTED_STYLE_REQUEST") == "true":
        conf["spark.hadoop.fs.s3a.path.style.access"] = "false"
    return conf


#: delta-spark's setting whose value a commit records as ``commitInfo.userMetadata``
USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"


def require(spark: SparkSession) -> None:
    """The session has Delta's extension, loaded (a session the tool started does; under
    spark-submit the classes come from the arguments of
    :func:`compactor.spark.session.submit_args`).

    Raises:
        SparkUnavailableError: it has not.
    """
    extension = SESSION_CONF["spark.sql.extensions"]
    configured = extension in (spark.conf.get("spark.sql.extensions", "") or "")
    jvm = spark.sparkContext._jvm
    if configured and jvm is not None and \
            jvm.org.apache.spark.util.Utils.classIsLoadable(extension):
        return
    raise SparkUnavailableError(
        "this Spark session has no Delta Lake ("
        + ("its classpath lacks delta-spark's jars" if configured else
           f"spark.sql.extensions lacks {extension}")
        + "): the ledger and the run history are read and written with delta-spark; "
          "nothing was changed",
        remedy="give spark-submit the installation's arguments, which put delta-spark's jars "
               "on the driver's classpath: python -m compactor.tools.ops.submit_args --master "
               "MASTER (one a line); in a session of your own, also "
               + " ".join(f"--conf {k}={v}" for k, v in SESSION_CONF.items()))


@contextmanager
def commit_metadata(spark: SparkSession, meta: Mapping[str, str]) -> Iterator[None]:
    """The block's delta-spark commits carry ``meta`` as their ``userMetadata`` (JSON), as
    delta-rs commits carry it as commitInfo fields (``compactor.state.tables.history``
    reads both)."""
    before = spark.conf.get(USER_METADATA, None)
    spark.conf.set(USER_METADATA, json.dumps(dict(meta), sort_keys=True))
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(USER_METADATA)
        else:
            spark.conf.set(USER_METADATA, before)


S3A = "org.apache.hadoop.fs.s3a.S3AFileSystem"


def reach_object_store(spark: SparkSession, options: Mapping[str, str]) -> None:
    """Give a running session (spark-submit's, a notebook's) S3A's settings for a state dir
    on an object store (:func:`s3a_conf`), in its Hadoop configuration: file systems it
    opens from now on use them.

    Raises:
        SparkUnavailableError: the session's classpath lacks S3A (the ``--s3a`` jars).
    """
    jvm = spark.sparkContext._jvm
    if jvm is None or not jvm.org.apache.spark.util.Utils.classIsLoadable(S3A):
        raise SparkUnavailableError(
            "this Spark session cannot reach the state dir on S3: its classpath lacks "
            "Hadoop's S3A (hadoop-aws); nothing was changed",
            remedy="fetch the jars once with `python -m compactor.tools.build.jars --s3a`; under "
                   "spark-submit give it the arguments of `python -m "
                   "compactor.tools.ops.submit_args --master MASTER --object-store`")
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in s3a_conf(options).items():
        hadoop.set(key.removeprefix("spark.hadoop."), value)


# ---------------------------------------------------------------------------------------------
# The state dir's tables in a session (compactor.erasure.ledger decides what; the lock, the
# table's creation and its error handling are the ledger's)


def read_requests(spark: SparkSession, path: str, statuses: frozenset[str], *, version: int,
                  not_applied_at: str | None = None) -> DataFrame:
    """The requests table's rows in ``statuses`` at ``version`` (and whose ``places`` have no
    apply at the place ``not_applied_at``), with the subject's digest as 32 bytes
    (``digest``)."""
    from pyspark.sql import functions as F

    require(spark)
    frame = (spark.read.format("delta").option("versionAsOf", version).load(path)
             .where(F.col("status").isin(sorted(statuses))))
    if not_applied_at:
        # only a row whose JSON names the place is parsed (a pending request has no places),
        # as the driver's summary tells them (compactor.erasure.ledger._not_applied)
        places = F.from_json(F.col("places"), "map<string,map<string,string>>")
        frame = frame.where(
            F.col("places").isNull()
            | ~F.col("places").contains(json.dumps(not_applied_at))
            | F.try_element_at(F.try_element_at(places, F.lit(not_applied_at)),
                               F.lit("applied_run_id")).isNull())
    return frame.withColumn("digest", F.unhex("subject_sha256"))


def merge_outcomes(spark: SparkSession, path: str, outcomes: DataFrame, columns: Sequence[str],
                   meta: Mapping[str, str]) -> int:
    """MERGE the ``update`` rows of ``outcomes`` into the requests table at ``path``: set
    ``columns`` where the request is still in ``expected_status``. Returns the rows
    updated."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    require(spark)
    source = outcomes.where(F.col("outcome") == "update")
    with commit_metadata(spark, meta):
        result = (DeltaTable.forPath(spark, path).alias("t")
                  .merge(source.alias("s"), "t.request_id = s.request_id "
                                            "AND t.status = s.expected_status")
                  .whenMatchedUpdate(set={c: F.col(f"s.{c}") for c in columns})
                  .execute())
    row = result.collect()[0].asDict() if result is not None else {}
    return int(row.get("num_updated_rows", row.get("num_affected_rows", 0)) or 0)


def moved_requests(spark: SparkSession, path: str, outcomes: DataFrame,
                   limit: int) -> tuple[dict[str, int], list[dict[str, object]]]:
    """The ``update`` rows of ``outcomes`` whose request is no longer in the status they were
    computed from (an ``erase cancel`` or ``retry`` committed while the run ran): what a
    :func:`merge_outcomes` now would leave alone. Returns their counts by the status the run
    computed, and the first ``limit`` by request id (``request_id``, ``status`` now,
    ``computed`` status, ``records_erased``)."""
    from pyspark.sql import functions as F

    require(spark)
    now = spark.read.format("delta").load(path).select(
        "request_id", F.col("status").alias("status_now"))
    moved = (outcomes.where(F.col("outcome") == "update")
             .select("request_id", "expected_status", F.col("status").alias("computed"),
                     "records_erased")
             .join(now, "request_id")
             .where(F.col("status_now") != F.col("expected_status")))
    counts = {r["computed"]: r["n"] for r in moved.groupBy("computed")
              .agg(F.count("*").alias("n")).collect()}
    if not counts:
        return {}, []
    rows = [{"request_id": r["request_id"], "status": r["status_now"],
             "computed": r["computed"], "records_erased": r["records_erased"]}
            for r in moved.orderBy("request_id").limit(limit).collect()]
    return counts, rows
