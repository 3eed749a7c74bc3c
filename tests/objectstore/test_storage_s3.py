"""The storage layer against a real S3 server (SeaweedFS): ranged reads, multipart writes,
file times, directory semantics, conditional writes, errors and the lease."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from compactor.codec.segment import iter_batches
from compactor.errors import ConditionFailedError, LogDirError, LogDirLockedError
from compactor.log import storage
from compactor.log.storage.objects import LEASE_NAME, RangedObject
from compactor.tools.fixtures.s3_server import S3Server
from compactor.tools.ops.generator import GeneratorConfig, generate
from tests.objectstore.conftest import fresh_url, settings_of, upload

REPO = Path(__file__).resolve().parents[2]


def _with(server: S3Server, **options: str) -> storage.StorageSettings:
    base = settings_of(server)
    return storage.StorageSettings(options={**base.options, **options})


def test_a_ranged_scan_fetches_one_window_at_a_time_and_reads_the_same_bytes(
        s3_storage: S3Server) -> None:
    data = os.urandom(300_000)
    url = fresh_url("ranged") + "/blob"
    storage.write_durable(url, data)
    fetched: list[tuple[int, int]] = []

    def fetch(start: int, end: int) -> bytes:
        fetched.append((start, end))
        return storage.read_bytes(url, start, end)

    view = RangedObject(fetch, len(data), read_ahead=64_000)
    got = b"".join(view[i:i + 1000] for i in range(0, len(data), 1000))
    assert got == data and len(view) == len(data)
    assert len(fetched) == -(-len(data) // 64_000)  # one GET per window, sequentially
    assert all(end - start <= 64_000 for start, end in fetched)
    assert view[5] == data[5] and view[-1] == data[-1] and view[10:10] == b""
    assert view[250_000:290_000] == data[250_000:290_000]  # a jump: one more window
    big = view[0:200_000]  # wider than a window: fetched exactly, once
    assert big == data[:200_000] and fetched[-1] == (0, 200_000)
    # newest first, as the writer walks a segment's batches: windows end where reading is
    backward = RangedObject(fetch, len(data), read_ahead=64_000)
    fetched.clear()
    got = b"".join(reversed([backward[i:i + 1000] for i in range(len(data) - 1000, -1, -1000)]))
    # (the first read cannot know the direction: it reads forward, to the end here)
    assert got == data and len(fetched) == -(-len(data) // 64_000) + 1
    assert all(end - start <= 64_000 for start, end in fetched)


def test_segments_read_by_ranges_frame_exactly_as_local_bytes(
        s3_server: S3Server, tmp_path: Path) -> None:
    generate(str(tmp_path / "logs"), GeneratorConfig(
        topics=("t",), partitions=1, records_per_partition=800, segment_bytes=64 * 1024,
        legacy_records=20, seed=5))
    url = upload(s3_server, tmp_path / "logs", "framing")
    before = storage.settings()
    storage.configure(_with(s3_server, read_ahead_mb="0.01"))  # 10 KB windows
    try:
        for log in sorted((tmp_path / "logs" / "t-0").glob("*.log")):
            local = list(iter_batches(log.read_bytes()))
            with storage.mapped(f"{url}/t-0/{log.name}") as data:
                remote = list(iter_batches(data))
            assert [(b.position, b.base_offset, b.raw) for b in remote] == \
                   [(b.position, b.base_offset, b.raw) for b in local]
    finally:
        storage.configure(before)


def test_walking_a_segment_newest_batch_first_fetches_each_window_once(
        s3_storage: S3Server, tmp_path: Path) -> None:
    """The writer's access pattern: frame forward, then each batch newest first (its 17-byte
    header, then the whole entry)."""
    generate(str(tmp_path / "logs"), GeneratorConfig(
        topics=("t",), partitions=1, records_per_partition=3000, segment_bytes=1 << 30,
        metadata_log=False, seed=6))
    data = next((tmp_path / "logs" / "t-0").glob("*.log")).read_bytes()
    url = fresh_url("newest-first") + "/0.log"
    storage.write_durable(url, data)
    fetched: list[tuple[int, int]] = []

    def fetch(start: int, end: int) -> bytes:
        fetched.append((start, end))
        return storage.read_bytes(url, start, end)

    window = 16_000
    view = RangedObject(fetch, len(data), read_ahead=window)
    frames = [(b.position, b.size_in_bytes) for b in iter_batches(view, verify_crc=False)]
    forward = len(fetched)
    newest_first = [next(iter_batches(view, start_position=pos, end_position=pos + size))
                    for pos, size in reversed(frames)]
    assert [b.raw for b in reversed(newest_first)] == [b.raw for b in iter_batches(data)]
    # a window ends inside some batch, which the next window starts with: each window brings at
    # least (window - largest batch) new bytes
    largest = max(size for _, size in frames)
    windows = -(-len(data) // (window - largest))
    assert forward <= windows and len(fetched) - forward <= windows + 1, fetched


def test_a_large_write_is_a_multipart_upload_with_its_mtime(s3_server: S3Server) -> None:
    before = storage.settings()
    storage.configure(_with(s3_server, part_size_mb="5"))
    try:
        url = fresh_url("multipart") + "/big.log"
        chunks = [os.urandom(1 << 20) for _ in range(11)]
        with storage.open_durable(url, mtime_ms=1_700_000_000_123) as write:
            for chunk in chunks:
                write(chunk)
        head = s3_server.client().head_object(Bucket="logs", Key=url.split("/", 3)[3])
        assert head["ETag"].strip('"').endswith("-3")  # 5 + 5 + 1 MiB
        assert storage.read_bytes(url) == b"".join(chunks)
        assert storage.stat(url).mtime_ms == 1_700_000_000_123
        assert head["Metadata"]["mtime-ms"] == "1700000000123"
    finally:
        storage.configure(before)


def test_a_failed_write_leaves_no_object_and_no_open_upload(s3_server: S3Server) -> None:
    before = storage.settings()
    storage.configure(_with(s3_server, part_size_mb="5"))
    try:
        url = fresh_url("aborted") + "/x.log.cleaned"
        with pytest.raises(ZeroDivisionError), storage.open_durable(url) as write:
            write(os.urandom(6 << 20))  # one part is uploaded
            raise ZeroDivisionError
        assert not storage.exists(url)
        uploads = s3_server.client().list_multipart_uploads(Bucket="logs")
        assert not [u for u in uploads.get("Uploads", ()) if u["Key"].endswith("x.log.cleaned")]
    finally:
        storage.configure(before)


def test_every_write_carries_mtime_and_objects_without_it_use_last_modified(
        s3_storage: S3Server) -> None:
    url = fresh_url("times")
    storage.write_durable(f"{url}/a", b"x", mtime_ms=42)
    assert storage.stat(f"{url}/a").mtime_ms == 42
    t0 = int(time.time() * 1000)
    storage.write_atomic(f"{url}/b", b"y")  # no mtime given: the time of the write
    assert abs(storage.stat(f"{url}/b").mtime_ms - t0) < 60_000
    storage.set_mtime(f"{url}/a", 77)
    assert storage.stat(f"{url}/a").mtime_ms == 77 and storage.read_bytes(f"{url}/a") == b"x"
    bucket_key = f"{url}/plain".split("/", 3)[3]
    s3_storage.client().put_object(Bucket="logs", Key=bucket_key, Body=b"z")  # no metadata
    modified = s3_storage.client().head_object(Bucket="logs", Key=bucket_key)["LastModified"]
    assert storage.stat(f"{url}/plain").mtime_ms == int(modified.timestamp() * 1000)


def test_prefixes_behave_as_directories(s3_storage: S3Server) -> None:
    url = fresh_url("dirs")
    storage.write_durable(f"{url}/t-0/0.log", b"")
    storage.write_durable(f"{url}/t-0/0.index", b"")
    storage.write_durable(f"{url}/meta.properties", b"")
    assert storage.list_dir(url) == ["meta.properties", "t-0"]
    assert storage.list_dir(f"{url}/t-0") == ["0.index", "0.log"]
    assert storage.is_dir(url) and storage.is_dir(f"{url}/t-0")
    assert not storage.is_dir(f"{url}/meta.properties") and storage.exists(f"{url}/t-0/0.log")
    assert not storage.exists(f"{url}/t-1") and not storage.exists(f"{url}/t-0/1.log")
    with pytest.raises(LogDirError) as err:
        storage.list_dir(f"{url}/missing")
    assert err.value.path == f"{url}/missing"
    storage.remove(f"{url}/t-0/0.index")
    with pytest.raises(LogDirError):
        storage.remove(f"{url}/t-0/0.index")
    storage.remove(f"{url}/t-0/0.index", missing_ok=True)


def test_conditional_create_refuses_an_existing_object(s3_storage: S3Server) -> None:
    url = fresh_url("conditional") + "/manifest"
    storage.write_new(url, b"first")
    with pytest.raises(ConditionFailedError):
        storage.write_new(url, b"second")
    assert storage.read_bytes(url) == b"first"


def test_errors_name_the_object_and_say_what_to_do(s3_server: S3Server) -> None:
    before = storage.settings()
    try:
        storage.configure(_with(s3_server, secret_access_key="wrong"))
        with pytest.raises(LogDirError) as err:
            storage.list_dir("s3://logs/anything")
        assert err.value.path == "s3://logs/anything"
        assert "SignatureDoesNotMatch" in str(err.value) and "AWS_SECRET_ACCESS_KEY" in str(
            err.value)
        storage.configure(settings_of(s3_server))
        with pytest.raises(LogDirError) as err:
            storage.read_bytes("s3://no-such-bucket/x")
        assert "no-such-bucket" in str(err.value) and err.value.remedy
    finally:
        storage.configure(before)


# --- the lease --------------------------------------------------------------------------------

HOLDER = r"""
import json, sys, time
from compactor.log import storage
settings = storage.StorageSettings(options=json.loads(sys.argv[2]))
storage.configure(settings)
with storage.log_dir_lock(sys.argv[1]):
    print("HELD", flush=True)
    sys.stdin.readline()  # the test breaks the lease meanwhile, then says go on
    time.sleep(float(sys.argv[3]))  # long enough for a renewal to notice
    try:
        storage.write_durable(sys.argv[1] + "/t-0/after", b"x")
        print("WROTE", flush=True)
    except Exception as err:
        print(type(err).__name__, flush=True)
"""


def _hold(server: S3Server, url: str, lease_seconds: str) -> subprocess.Popen:
    options = {**settings_of(server).options, "lease_seconds": lease_seconds}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, url, json.dumps(options), lease_seconds],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "HELD"
    return holder


def test_a_live_lease_refuses_others_and_break_lease_takes_it_over(
        s3_storage: S3Server) -> None:
    url = fresh_url("lease")
    storage.write_durable(f"{url}/t-0/0.log", b"")
    holder = _hold(s3_storage, url, "3")
    try:
        with pytest.raises(LogDirLockedError) as err:
            with storage.log_dir_lock(url):
                pass
        assert f"pid {holder.pid}" in str(err.value) and "--break-lease" in str(err.value)
        assert err.value.exit_code == 4
        storage.configure(storage.StorageSettings(settings_of(s3_storage).options,
                                                  break_lease=True))
        with storage.log_dir_lock(url):
            lease = json.loads(storage.read_bytes(f"{url}/{LEASE_NAME}"))
            assert lease["pid"] == os.getpid()
            assert holder.stdin is not None
            holder.stdin.write("go\n")
            holder.stdin.flush()
            # the old holder's next renewal is refused: from then on it changes nothing
            assert holder.stdout is not None
            assert holder.stdout.readline().strip() == "LogDirLockedError"
        assert not storage.exists(f"{url}/{LEASE_NAME}")  # released
        assert not storage.exists(f"{url}/t-0/after")
    finally:
        holder.kill()
        holder.wait()


def test_an_expired_lease_is_taken_without_breaking_it(s3_storage: S3Server) -> None:
    url = fresh_url("expired")
    storage.write_durable(f"{url}/t-0/0.log", b"")
    storage.write_durable(f"{url}/{LEASE_NAME}", json.dumps({
        "owner": "crashed", "host": "elsewhere", "pid": 1,
        "expires_ms": int(time.time() * 1000) - 1}).encode())
    with storage.log_dir_lock(url):
        assert json.loads(storage.read_bytes(f"{url}/{LEASE_NAME}"))["pid"] == os.getpid()
    assert not storage.exists(f"{url}/{LEASE_NAME}")


def test_a_lease_released_and_taken_again_while_it_is_read_is_held(
        s3_storage: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run whose lease put is refused reads the holder's lease; if that holder releases it
    and a third run takes it between the run's HEAD and its GET (seen on a loaded machine,
    four `erase request`s racing for the ledger's writer lease), the run is refused as by any
    live lease, which the state dir's waiting lock retries: not a storage error."""
    url = fresh_url("lease-race")
    lease_url = f"{url}/{LEASE_NAME}"
    storage.write_durable(f"{url}/t-0/0.log", b"")

    def lease(pid: int) -> bytes:
        return json.dumps({"owner": f"run-{pid}", "host": "elsewhere", "pid": pid,
                           "expires_ms": int(time.time() * 1000) + 60_000}).encode()

    storage.write_durable(lease_url, lease(101))
    store = storage.store_for(url)
    real_read = store.read_bytes

    def racing_read(path: str, *args, **kwargs) -> bytes:
        if path != lease_url:
            return real_read(path, *args, **kwargs)
        store.remove(path)  # the holder releases it ...
        try:
            return real_read(path, *args, **kwargs)
        finally:
            storage.write_durable(path, lease(202))  # ... and a third run takes it

    monkeypatch.setattr(store, "read_bytes", racing_read)
    with pytest.raises(LogDirLockedError):
        with storage.log_dir_lock(url):
            pass
    monkeypatch.undo()
    assert json.loads(storage.read_bytes(lease_url))["pid"] == 202  # the third run's, kept


def test_a_lease_seen_released_but_taken_first_by_another_run_is_held(
        s3_storage: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run whose lease put is refused finds the lease gone at its HEAD (released) and races
    for it again; when another run wins that race, the run is refused as by any live lease
    (``_Lease._race_again``), not with the store's raw ``ConditionFailedError``."""
    url = fresh_url("lease-rerace")
    lease_url = f"{url}/{LEASE_NAME}"
    storage.write_durable(f"{url}/t-0/0.log", b"")
    storage.write_durable(lease_url, json.dumps({
        "owner": "run-303", "host": "elsewhere", "pid": 303,
        "expires_ms": int(time.time() * 1000) + 60_000}).encode())
    store = storage.store_for(url)
    real_head = store.head
    seen: list[str] = []

    def released_at_head(path: str, *args, **kwargs):
        if path == lease_url and not seen:  # the HEAD sees it released; the other run's is there
            seen.append(path)
            return None
        return real_head(path, *args, **kwargs)

    monkeypatch.setattr(store, "head", released_at_head)
    with pytest.raises(LogDirLockedError):
        with storage.log_dir_lock(url):
            pass
    monkeypatch.undo()
    assert seen == [lease_url]
    assert json.loads(storage.read_bytes(lease_url))["pid"] == 303  # the other run's, kept


def test_a_lease_needs_an_existing_log_dir(s3_storage: S3Server) -> None:
    with pytest.raises(LogDirError) as err:
        with storage.log_dir_lock(fresh_url("nothing-here")):
            pass
    assert "does not exist" in str(err.value)
