"""The names of a partition directory's files (Kafka's ``LogFileUtils``): the suffixes of a
segment's files and of the temporary files a swap leaves. No I/O; imported by every module
that names files, so that each suffix is spelled once."""

from __future__ import annotations

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"
INDEX_FILE_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
# LocalLog.CleanedFileSuffix, LogFileUtils.SWAP_FILE_SUFFIX, LogFileUtils.DELETED_FILE_SUFFIX
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"
TEMP_SUFFIXES = (CLEANED_SUFFIX, SWAP_SUFFIX, DELETED_SUFFIX)
# the KRaft metadata log's topic and its one partition directory (Topic.CLUSTER_METADATA_TOPIC_NAME)
METADATA_TOPIC = "__cluster_metadata"
METADATA_DIR_NAME = f"{METADATA_TOPIC}-0"
