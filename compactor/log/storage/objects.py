"""Log dirs in S3 and S3-compatible object stores, through boto3.

boto3 is configured the way the AWS ecosystem expects: ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION``, ``AWS_PROFILE`` and
``AWS_ENDPOINT_URL[_S3]`` from the environment or ``~/.aws``, and ``--storage-option`` for the
rest (:data:`compactor.log.storage.locations.STORAGE_OPTIONS`). Chosen over pyarrow's S3 layer
because the commit protocol needs what only the S3 API itself offers: user metadata
(``x-amz-meta-mtime-ms``), conditional writes (``If-None-Match``, ``If-Match``) and copies
conditional on the source's ETag.

What differs from a local disk, and how each is handled:

* no directories: a "directory" is a key prefix, it exists while an object lies under it;
* no rename: :meth:`ObjectStore.rename` is copy-then-delete (not atomic); the swap never relies
  on it (:mod:`compactor.log.manifest` commits with one PUT);
* no file times: every object written carries ``mtime-ms`` metadata; objects without it (an
  upload that did not set it) fall back to Last-Modified;
* no fcntl: :meth:`ObjectStore.lease` holds a lease object created with ``If-None-Match: *``.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

from crc32c import crc32c as crc32c_of

from compactor.errors import ConditionFailedError, LogDirError, LogDirLockedError, StorageError
from compactor.log.storage.local import FileStat, Link
from compactor.log.storage.locations import split

MTIME_KEY = "mtime-ms"
LEASE_NAME = ".compactor-lease.json"
_MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class Upload:
    """What :meth:`ObjectStore.open_durable` yields: called with bytes, it appends them to
    the object; :meth:`append_copy` appends bytes another file holds, which an upload can
    only send itself."""

    write: Callable[[Any], None]

    def __call__(self, data: Any) -> None:
        self.write(data)

    def append_copy(self, data: Any, source: str, start: int) -> None:
        """Append ``data`` (the bytes of ``source`` from ``start`` on)."""
        self.write(data)


@dataclass(frozen=True, slots=True)
class ObjectStat:
    size: int
    mtime_ms: int
    is_dir: bool
    etag: str = ""


class RangedObject:
    """An object's bytes read by ranged GETs, sliceable like ``bytes``: each miss fetches one
    window of ``read_ahead`` bytes (or the slice, when wider) in the direction of travel --
    from the missed position on when reading forward, ending where the current window begins
    when reading backward (the writer walks a segment's batches newest first) -- so a scan
    either way costs about one request per ``read_ahead`` bytes and holds at most 1.25
    windows in memory, never the whole segment."""

    def __init__(self, fetch: Callable[[int, int], bytes], size: int, read_ahead: int) -> None:
        self._fetch, self._size, self._read_ahead = fetch, size, read_ahead
        self._start, self._window = 0, b""

    def __len__(self) -> int:
        return self._size

    def __getitem__(self, item: int | slice) -> Any:
        if isinstance(item, int):
            index = item + self._size if item < 0 else item
            if not 0 <= index < self._size:
                raise IndexError("object index out of range")
            return self[index:index + 1][0]
        start, stop, step = item.indices(self._size)
        if step != 1:
            raise ValueError("ranged object slices take no step")
        if start >= stop:
            return b""
        if not (self._start <= start and stop <= self._start + len(self._window)):
            keep = min(len(self._window), self._read_ahead // 4)
            if (self._window and self._start - self._read_ahead <= start < self._start
                    and stop <= self._start + keep):
                # backward, just before the window: fetch the window before it and keep its
                # first quarter, so the batch that straddles its start is whole
                begin = max(0, self._start - self._read_ahead)
                self._window = self._fetch(begin, self._start) + self._window[:keep]
                self._start = begin
            else:
                end = min(self._size, max(stop, start + self._read_ahead))
                self._start, self._window = start, self._fetch(start, end)
        return self._window[start - self._start:stop - self._start]


class ObjectStore:
    """One S3 endpoint with one set of credentials (boto3 clients are thread-safe)."""

    def __init__(self, options: Mapping[str, str]) -> None:
        # imported here: boto3 takes a third of a second to import, which runs on local paths
        # need not pay
        import boto3
        from botocore.config import Config

        session = boto3.session.Session(
            profile_name=options.get("profile"),
            aws_access_key_id=options.get("access_key_id"),
            aws_secret_access_key=options.get("secret_access_key"),
            aws_session_token=options.get("session_token"),
            region_name=options.get("region"),
        )
        self.session = session
        self.endpoint_url = options.get("endpoint_url")
        self.client = session.client(
            "s3", endpoint_url=self.endpoint_url,
            config=Config(s3={"addressing_style": options.get("addressing_style", "auto")},
                          retries={"mode": "standard", "max_attempts": 5},
                          max_pool_connections=32))
        self.part_size = int(float(options.get("part_size_mb", 8)) * _MIB)
        self.read_ahead = int(float(options.get("read_ahead_mb", 8)) * _MIB)
        self.lease_seconds = float(options.get("lease_seconds", 60))
        self._leases: dict[str, _Lease] = {}

    # --- errors --------------------------------------------------------------------------

    def _fail(self, err: Exception, url: str, action: str) -> LogDirError:
        """The error for a failed request: :class:`ConditionFailedError` for a refused
        condition, else :class:`StorageError` with what to check."""
        code, status = _error_code(err)
        remedy = {
            "NoSuchBucket": "the bucket does not exist: check the URL (s3://bucket/prefix) and "
                            "the endpoint",
            "AccessDenied": "the credentials may not do this: check AWS_PROFILE / "
                            "AWS_ACCESS_KEY_ID and the bucket policy",
            "InvalidAccessKeyId": "the access key is unknown to this endpoint: check "
                                  "AWS_ACCESS_KEY_ID and --storage-option endpoint_url",
            "SignatureDoesNotMatch": "the secret key is wrong: check AWS_SECRET_ACCESS_KEY",
            "Forbidden": "the request was refused: check the credentials (AWS_ACCESS_KEY_ID, "
                         "AWS_SECRET_ACCESS_KEY or the profile) and the bucket policy",
        }.get(code)
        if remedy is None and code in ("EndpointConnectionError", "ConnectionClosedError",
                                       "ConnectTimeoutError", "ReadTimeoutError"):
            remedy = (f"the endpoint {self.endpoint_url or 'of AWS'} cannot be reached: check "
                      f"--storage-option endpoint_url / AWS_ENDPOINT_URL and the network")
        if remedy is None and code in ("NoCredentialsError", "PartialCredentialsError",
                                       "ProfileNotFound"):
            remedy = ("no usable credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
                      "AWS_PROFILE, or --storage-option access_key_id=... secret_access_key=...")
        detail = f"{code}" + (f" (HTTP {status})" if status else "")
        if code in ("PreconditionFailed", "ConditionalRequestConflict"):
            return ConditionFailedError(f"cannot {action}: {detail}", path=url)
        return StorageError(f"cannot {action}: {detail}: {err}", path=url, remedy=remedy)

    def _lease_of(self, url: str) -> _Lease | None:
        for prefix, lease in self._leases.items():
            if url == prefix or url.startswith(prefix + "/"):
                return lease
        return None

    def _check_lease(self, url: str) -> None:
        """Refuse a driver's change under a log dir whose lease this process has lost, or
        may have lost (:meth:`_Lease.check`)."""
        lease = self._lease_of(url)
        if lease is not None:
            lease.check(url)

    def fence(self, url: str) -> None:
        """Prove, right now, that this process still holds the lease of the log dir ``url``
        lies in (a conditional renewal, :meth:`_Lease.confirm`); nothing to prove where it
        holds none (an executor, a read-only command).

        Raises:
            LogDirLockedError: the lease is lost or may have expired.
            StorageError: the store could not be asked (the caller must not go on either).
        """
        lease = self._lease_of(url)
        if lease is not None:
            lease.confirm(url)

    # --- reading -------------------------------------------------------------------------

    def head(self, url: str) -> dict[str, Any] | None:
        bucket, key = split(url)
        if not key:
            return None
        try:
            return self.client.head_object(Bucket=bucket, Key=key)
        except Exception as err:
            if _error_code(err)[1] == 404:
                return None
            raise self._fail(err, url, "read object metadata") from err

    def read_bytes(self, url: str, start: int = 0, end: int | None = None) -> bytes:
        bucket, key = split(url)
        if end is not None and end <= start:
            return b""
        rng = f"bytes={start}-" + ("" if end is None else str(end - 1))
        try:
            if start == 0 and end is None:
                body = self.client.get_object(Bucket=bucket, Key=key)["Body"]
            else:
                body = self.client.get_object(Bucket=bucket, Key=key, Range=rng)["Body"]
            return body.read()
        except Exception as err:
            if _error_code(err)[0] == "InvalidRange":  # start at or past the end
                return b""
            raise self._fail(err, url, "read object") from err

    def crc32c(self, url: str) -> int:
        bucket, key = split(url)
        value = 0
        try:
            body = self.client.get_object(Bucket=bucket, Key=key)["Body"]
            for chunk in body.iter_chunks(_MIB):
                value = crc32c_of(chunk, value)
        except Exception as err:
            raise self._fail(err, url, "read object") from err
        return value

    def ranged(self, url: str) -> RangedObject:
        st = self.object_stat(url)
        return RangedObject(lambda a, b: self.read_bytes(url, a, b), st.size, self.read_ahead)

    def is_dir(self, url: str) -> bool:
        bucket, key = split(url)
        try:
            if not key:
                self.client.head_bucket(Bucket=bucket)
                return True
            listed = self.client.list_objects_v2(Bucket=bucket, Prefix=key + "/", MaxKeys=1)
        except Exception as err:
            if _error_code(err)[1] == 404:
                return False
            raise self._fail(err, url, "list objects") from err
        return listed.get("KeyCount", 0) > 0

    def exists(self, url: str) -> bool:
        return self.head(url) is not None or self.is_dir(url)

    def object_stat(self, url: str) -> ObjectStat:
        found = self.head(url)
        if found is None:
            if self.is_dir(url):
                return ObjectStat(size=0, mtime_ms=0, is_dir=True)
            raise LogDirError("cannot stat: no such object", path=url)
        meta = found.get("Metadata", {})
        mtime = meta.get(MTIME_KEY)
        mtime_ms = (int(mtime) if mtime and mtime.lstrip("-").isdigit()
                    else int(found["LastModified"].timestamp() * 1000))
        return ObjectStat(size=found["ContentLength"], mtime_ms=mtime_ms, is_dir=False,
                          etag=found.get("ETag", ""))

    def list_dir(self, url: str) -> list[str]:
        """Names directly under ``url`` (objects and sub-prefixes), sorted."""
        bucket, key = split(url)
        prefix = key + "/" if key else ""
        names: set[str] = set()
        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=bucket, Prefix=prefix, Delimiter="/")
            for page in pages:
                names.update(o["Key"][len(prefix):] for o in page.get("Contents", ()))
                names.update(p["Prefix"][len(prefix):].rstrip("/")
                             for p in page.get("CommonPrefixes", ()))
        except Exception as err:
            raise self._fail(err, url, "list objects") from err
        names.discard("")  # a "directory marker" object
        if not names and not self.is_dir(url):
            raise LogDirError("cannot list directory: no object lies under this prefix",
                              path=url)
        return sorted(names)

    # --- writing -------------------------------------------------------------------------

    @staticmethod
    def _metadata(mtime_ms: int | None) -> dict[str, str]:
        return {MTIME_KEY: str(int(time.time() * 1000) if mtime_ms is None else mtime_ms)}

    def put(self, url: str, data: bytes, *, mtime_ms: int | None = None,
            if_none_match: bool = False, if_match: str | None = None,
            fenced: bool = True) -> str:
        """One PUT (atomic: readers see the old object or the new one). Returns the ETag.
        ``fenced=False`` only for the lease's own writes.

        Raises:
            ConditionFailedError: a condition does not hold (also when a store answers 404
                to ``if_match``: the object is gone).
        """
        if fenced:
            self._check_lease(url)
        bucket, key = split(url)
        extra: dict[str, str] = {}
        if if_none_match:
            extra["IfNoneMatch"] = "*"
        if if_match:
            extra["IfMatch"] = if_match
        try:
            return self.client.put_object(Bucket=bucket, Key=key, Body=data,
                                          Metadata=self._metadata(mtime_ms), **extra)["ETag"]
        except Exception as err:
            if if_match and _error_code(err)[1] == 404:
                raise ConditionFailedError("cannot write object: it is gone (If-Match on a "
                                           "missing object)", path=url) from err
            raise self._fail(err, url, "write object") from err

    def metadata(self, url: str) -> tuple[str, dict[str, str]] | None:
        """``(ETag, user metadata)`` of an object, ``None`` when there is none."""
        found = self.head(url)
        return None if found is None else (found.get("ETag", ""), dict(found.get("Metadata", {})))

    def identities(self, url: str) -> dict[str, str]:
        """``{name: ETag}`` of the objects directly under the prefix ``url``, from one listing
        (an ETag changes whenever an object is written again)."""
        bucket, key = split(url)
        prefix = key + "/" if key else ""
        out: dict[str, str] = {}
        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=bucket, Prefix=prefix, Delimiter="/")
            for page in pages:
                for o in page.get("Contents", ()):
                    name = o["Key"][len(prefix):]
                    if name:
                        out[name] = o["ETag"]
        except Exception as err:
            raise self._fail(err, url, "list objects") from err
        return out

    @contextmanager
    def open_write(self, url: str, *, mtime_ms: int | None = None
                   ) -> Iterator[Callable[[bytes], None]]:
        """Stream an object: parts of ``part_size_mb`` go up as a multipart upload as soon as
        they fill (memory holds one part); an object smaller than one part is a single PUT.
        Nothing is visible under ``url`` until the block ends normally; on an exception the
        upload is aborted."""
        self._check_lease(url)
        bucket, key = split(url)
        meta = self._metadata(mtime_ms)
        buffer = bytearray()
        parts: list[dict[str, Any]] = []
        upload: list[str] = []

        def send_part() -> None:
            if not upload:
                upload.append(self.client.create_multipart_upload(
                    Bucket=bucket, Key=key, Metadata=meta)["UploadId"])
            number = len(parts) + 1
            etag = self.client.upload_part(Bucket=bucket, Key=key, UploadId=upload[0],
                                           PartNumber=number, Body=bytes(buffer))["ETag"]
            parts.append({"ETag": etag, "PartNumber": number})
            buffer.clear()

        def write(data: bytes) -> None:
            buffer.extend(data)
            if len(buffer) >= self.part_size:
                try:
                    send_part()
                except Exception as err:
                    raise self._fail(err, url, "upload part of object") from err

        try:
            yield write
            if upload:
                if buffer:
                    send_part()
                self.client.complete_multipart_upload(
                    Bucket=bucket, Key=key, UploadId=upload[0],
                    MultipartUpload={"Parts": parts})
            else:
                self.client.put_object(Bucket=bucket, Key=key, Body=bytes(buffer),
                                       Metadata=meta)
        except BaseException as err:
            if upload:
                try:
                    self.client.abort_multipart_upload(Bucket=bucket, Key=key,
                                                       UploadId=upload[0])
                except Exception:
                    pass  # the bucket's lifecycle rule for incomplete uploads removes it
            if isinstance(err, Exception) and not isinstance(err, LogDirError) \
                    and _is_client_error(err):
                raise self._fail(err, url, "write object") from err
            raise

    def copy(self, src: str, dst: str, *, if_source_etag: str | None = None,
             mtime_ms: int | None = None, metadata: Mapping[str, str] | None = None) -> None:
        """Server-side copy (atomic at ``dst``), keeping the source's metadata unless
        ``mtime_ms`` or ``metadata`` (the whole set) replaces it; refused
        (:class:`ConditionFailedError`) when the source's ETag is not ``if_source_etag``."""
        self._check_lease(dst)
        sb, sk = split(src)
        db, dk = split(dst)
        extra: dict[str, Any] = {}
        if if_source_etag:
            extra["CopySourceIfMatch"] = if_source_etag
        if mtime_ms is not None:
            extra.update(Metadata=self._metadata(mtime_ms), MetadataDirective="REPLACE")
        if metadata is not None:
            extra.update(Metadata=dict(metadata), MetadataDirective="REPLACE")
        try:
            self.client.copy_object(Bucket=db, Key=dk, CopySource={"Bucket": sb, "Key": sk},
                                    **extra)
        except Exception as err:
            raise self._fail(err, src, f"copy object to {dst}") from err

    def set_mtime(self, url: str, mtime_ms: int) -> None:
        self.copy(url, url, mtime_ms=mtime_ms)

    def rename(self, src: str, dst: str) -> None:
        """Copy then delete: not atomic (a crash between leaves both); callers are idempotent."""
        self.copy(src, dst)
        self.remove(src, missing_ok=True)

    def remove(self, url: str, *, missing_ok: bool = False, if_match: str | None = None,
               fenced: bool = True) -> None:
        """Delete an object; with ``if_match`` only while it still has that ETag
        (:class:`ConditionFailedError` otherwise)."""
        if fenced:
            self._check_lease(url)
        if not missing_ok and self.head(url) is None:
            raise LogDirError("cannot delete missing object", path=url)
        bucket, key = split(url)
        try:
            if if_match:
                self.client.delete_object(Bucket=bucket, Key=key, IfMatch=if_match)
            else:
                self.client.delete_object(Bucket=bucket, Key=key)
        except Exception as err:
            if missing_ok and _error_code(err)[1] == 404:
                return
            raise self._fail(err, url, "delete object") from err

    # --- the rest of the Store protocol (compactor.log.storage.stores) ------------------

    renames_atomically = False

    @contextmanager
    def mapped(self, url: str) -> Iterator[RangedObject]:
        """The object's bytes, fetched by ranged GETs with bounded read-ahead."""
        yield self.ranged(url)

    def read_text(self, url: str) -> str:
        try:
            return self.read_bytes(url).decode("utf-8")
        except UnicodeDecodeError as err:
            raise LogDirError(f"file is not UTF-8 text: {err}", path=url) from err

    def release_cache(self, url: str) -> None:
        """Nothing to release: ranged reads keep no page cache (:class:`RangedObject`)."""

    def is_link(self, url: str) -> bool:
        return False  # an object store has no links

    def stat(self, url: str) -> FileStat:
        """Size and modification time (the ``mtime-ms`` metadata, else Last-Modified)."""
        st = self.object_stat(url)
        return FileStat(size=st.size, mtime_ms=st.mtime_ms, is_dir=st.is_dir)

    def links(self, url: str) -> dict[str, Link]:
        return {}  # neither symbolic nor hard links

    def absolute(self, url: str) -> str:
        return url

    def real_path(self, url: str) -> str:
        return url

    def make_dirs(self, url: str) -> None:
        """Nothing to create: a prefix exists once an object lies under it."""

    def fsync_dir(self, url: str) -> None:
        """Nothing to flush: a PUT is durable when it returns."""

    def write_durable(self, url: str, data: bytes, *, mtime_ms: int | None = None,
                      fsync: bool = True) -> None:
        self.put(url, data, mtime_ms=mtime_ms)  # one PUT, durable either way

    @contextmanager
    def open_durable(self, url: str, *, mtime_ms: int | None = None, fsync: bool = True
                     ) -> Iterator[Upload]:
        with self.open_write(url, mtime_ms=mtime_ms) as write:
            yield Upload(write)

    def write_atomic(self, url: str, data: bytes) -> None:
        self.put(url, data)  # readers see the old object or the new one

    def write_output(self, url: str, data: bytes) -> None:
        self.put(url, data)

    def output_problem(self, url: str) -> str | None:
        return None  # known only when it is written

    def lease_lost(self, url: str) -> LogDirLockedError | None:
        """Why this process no longer holds the lease of the log dir ``url`` lies in (its
        :meth:`fence` fails), else ``None``; a store that cannot be asked says nothing here
        (the run's own next write fails with that)."""
        try:
            self.fence(url)
        except LogDirLockedError as err:
            return err
        except LogDirError:  # StorageError: unknown, not lost
            return None
        return None

    def log_dir_lock(self, log_dir: str, *, break_lease: bool
                     ) -> AbstractContextManager[None]:
        return self.lease(log_dir, break_lease=break_lease)

    def waiting_lock(self, url: str, wait_s: float) -> AbstractContextManager[None]:
        return self.waiting_lease(url, wait_s)

    # --- the lease -----------------------------------------------------------------------

    @contextmanager
    def lease(self, log_dir: str, *, break_lease: bool = False) -> Iterator[None]:
        """Hold ``<log_dir>/.compactor-lease.json`` for the block (see :class:`_Lease`)."""
        if not self.is_dir(log_dir):
            raise LogDirError("log dir does not exist: no object lies under this prefix",
                              path=log_dir)
        lease = _Lease(self, join_key(log_dir, LEASE_NAME), self.lease_seconds)
        lease.acquire(break_lease=break_lease)
        self._leases[log_dir] = lease
        try:
            yield
        finally:
            self._leases.pop(log_dir, None)
            lease.release()

    @contextmanager
    def waiting_lease(self, url: str, wait_s: float) -> Iterator[None]:
        """Hold the lease object ``url`` (:class:`_Lease`) for the block, waiting up to
        ``wait_s`` seconds while another process holds it.

        Raises:
            LogDirLockedError: another process held it all that time.
        """
        deadline = time.monotonic() + wait_s
        while True:
            lease = _Lease(self, url, self.lease_seconds)
            try:
                lease.acquire(break_lease=False)
                break
            except (LogDirLockedError, ConditionFailedError):  # held, or another won the race
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.05)
        try:
            yield
        finally:
            lease.release()

    def delta_options(self) -> dict[str, str]:
        """The same endpoint and credentials, as ``deltalake`` (object_store) storage options.

        Credentials are resolved by boto3 (so profiles work for the ledger too). Concurrent
        commits to one table are made safe by conditional PUTs (``conditional_put=etag``:
        object_store writes each commit file with ``If-None-Match: *``), which AWS S3 and the
        S3-compatible stores supporting conditional writes honour; no DynamoDB lock is needed.
        """
        out = {"conditional_put": "etag"}
        creds = self.session.get_credentials()
        if creds is not None:
            frozen = creds.get_frozen_credentials()
            out.update(AWS_ACCESS_KEY_ID=frozen.access_key,
                       AWS_SECRET_ACCESS_KEY=frozen.secret_key)
            if frozen.token:
                out["AWS_SESSION_TOKEN"] = frozen.token
        out["AWS_REGION"] = self.client.meta.region_name or "us-east-1"
        endpoint = self.endpoint_url or self.client.meta.endpoint_url
        if endpoint:
            out["AWS_ENDPOINT_URL"] = endpoint
            if endpoint.startswith("http://"):
                out["AWS_ALLOW_HTTP"] = "true"
        if self.client.meta.config.s3 and \
                self.client.meta.config.s3.get("addressing_style") == "virtual":
            out["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "true"
        return out


def join_key(url: str, name: str) -> str:
    return url.rstrip("/") + "/" + name


class _Lease:
    """A lease object: ``{"owner", "host", "pid", "expires_ms"}``.

    Taken with ``If-None-Match: *`` (exactly one of two racing runs succeeds); an expired
    lease, or any lease with ``--break-lease``, is taken over with ``If-Match: <its ETag>``
    (again exactly one winner). Released with a delete conditional on the last ETag.

    Fencing. The lease is this run's only while its last renewal was accepted and less than
    the lease time minus a margin (a quarter of it) has passed since that renewal was sent:
    :attr:`valid_until`, on the monotonic clock. A thread renews it every third of its
    lifetime with ``If-Match`` on the last ETag, and retries a failed renewal every tenth;
    the lease is lost for good when a renewal is refused (someone took it over or deleted
    it) or when renewals kept failing until :attr:`valid_until` passed (from then on
    another run may take it over, so nothing this one does is safe any more). Every change
    under the log dir first checks both (:meth:`check`), and the commit point and each step
    of a roll-forward first renew synchronously (:meth:`confirm`): at that moment no other
    run holds the lease, and none can take it before :attr:`valid_until` without
    ``--break-lease``.
    """

    def __init__(self, store: ObjectStore, url: str, seconds: float) -> None:
        self.store, self.url, self.seconds = store, url, seconds
        self.margin = seconds / 4
        self.owner = uuid.uuid4().hex
        self.etag = ""
        self.lost = ""
        self.valid_until = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _body(self) -> bytes:
        return json.dumps({
            "owner": self.owner, "host": socket.gethostname(), "pid": os.getpid(),
            "expires_ms": int((time.time() + self.seconds) * 1000),
        }).encode()

    def _written(self, etag: str, sent: float) -> None:
        self.etag, self.valid_until = etag, sent + self.seconds - self.margin

    def acquire(self, *, break_lease: bool) -> None:
        sent = time.monotonic()
        try:
            self._written(self.store.put(self.url, self._body(), if_none_match=True,
                                         fenced=False), sent)
        except ConditionFailedError:
            self._take_over(break_lease)
        self._thread = threading.Thread(target=self._renew, name="compactor-lease",
                                        daemon=True)
        self._thread.start()

    def _take_over(self, break_lease: bool) -> None:
        found = self.store.head(self.url)
        sent = time.monotonic()
        if found is None:  # released meanwhile: race for it again
            self._race_again(sent)
            return
        try:
            raw = self.store.read_bytes(self.url)
        except StorageError:
            again = self.store.head(self.url)
            if again is None:  # released between the HEAD and the GET: race for it again
                self._race_again(time.monotonic())
                return
            if again.get("ETag") == found.get("ETag"):
                raise  # the same lease, unreadable
            # released and taken by another run between the HEAD and the GET (seen with
            # four runs racing for a state dir's lease): held, as by any live lease
            raise LogDirLockedError("the lease changed hands while this run read it",
                                    path=self.url, remedy="wait for that run to finish"
                                    ) from None
        try:
            holder = json.loads(raw)
            expires = int(holder["expires_ms"])
        except (ValueError, KeyError, TypeError):
            holder, expires = {}, 0
        now = int(time.time() * 1000)
        if expires > now and not break_lease:
            until = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(expires / 1000))
            raise LogDirLockedError(
                f"log dir is leased by another kafka-compactor run (host "
                f"{holder.get('host', '?')}, pid {holder.get('pid', '?')}) until {until}",
                path=self.url,
                remedy="wait for that run to finish; if it crashed, wait for the lease to "
                       "expire or rerun with --break-lease")
        try:
            self._written(self.store.put(self.url, self._body(), if_match=found["ETag"],
                                         fenced=False), sent)
        except ConditionFailedError as err:
            raise LogDirLockedError("another run took the expired lease first", path=self.url,
                                    remedy="wait for that run to finish") from err

    def _race_again(self, sent: float) -> None:
        """Take a lease found released, unless another run takes it first."""
        try:
            self._written(self.store.put(self.url, self._body(), if_none_match=True,
                                         fenced=False), sent)
        except ConditionFailedError as err:
            raise LogDirLockedError("another run took the released lease first",
                                    path=self.url, remedy="wait for that run to finish") from err

    def _renew_once(self) -> None:
        """One conditional renewal; marks the lease lost when it is refused or when it
        failed past :attr:`valid_until`. Call with ``_lock`` held.

        Raises:
            LogDirError: the renewal failed (the lease may still be valid).
        """
        sent = time.monotonic()
        try:
            self._written(self.store.put(self.url, self._body(), if_match=self.etag,
                                         fenced=False), sent)
        except ConditionFailedError:
            self.lost = "another run took it over or deleted it"
            raise
        except LogDirError as err:
            if time.monotonic() >= self.valid_until:
                self.lost = (f"renewals failed until it could have expired "
                             f"({err.message})")
            raise

    def _renew(self) -> None:
        interval = self.seconds / 3
        while not self._stop.wait(interval):
            with self._lock:
                if self.lost:
                    return
                try:
                    self._renew_once()
                    interval = self.seconds / 3
                except LogDirError:
                    if self.lost:
                        return
                    interval = self.seconds / 10  # transient: again soon, before it ends

    def _refuse(self, url: str) -> LogDirLockedError:
        return LogDirLockedError(
            f"the lease on the log dir was lost ({self.lost}); this run stops changing it",
            path=url, remedy="another run may hold the log dir now: let it finish, then run "
                             "`compactor recover` and this command again")

    def check(self, url: str) -> None:
        """Raises: LogDirLockedError: the lease is lost, or its validity has run out."""
        if not self.lost and time.monotonic() >= self.valid_until:
            self.lost = "it was not renewed in time"
        if self.lost:
            raise self._refuse(url)

    def confirm(self, url: str) -> None:
        """Renew now (:meth:`check` first).

        Raises:
            LogDirLockedError: the lease is lost.
            StorageError: the renewal failed; the lease may still hold, but it is not proven.
        """
        with self._lock:
            self.check(url)
            try:
                self._renew_once()
            except ConditionFailedError:
                raise self._refuse(url) from None
            except LogDirError:
                if self.lost:
                    raise self._refuse(url) from None
                raise

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if not self.lost:
            try:
                self.store.remove(self.url, missing_ok=True, if_match=self.etag, fenced=False)
            except LogDirError:
                pass  # broken meanwhile, or unreachable: the lease expires on its own


def _error_code(err: Exception) -> tuple[str, int | None]:
    response = getattr(err, "response", None)
    if isinstance(response, dict):
        error = response.get("Error", {})
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        code = str(error.get("Code", ""))
        if code in ("404", "NoSuchKey", "NotFound"):
            return "NoSuchKey", 404
        if code == "403":  # a HEAD's refusal has no body to say why
            return "Forbidden", 403
        return code or type(err).__name__, status
    return type(err).__name__, None


def _is_client_error(err: Exception) -> bool:
    return type(err).__module__.startswith(("botocore", "boto3", "urllib3"))
