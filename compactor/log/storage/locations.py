"""Where a path points: a local file or an object in a bucket, and the options that reach it.

A location is a string, as before: a local path (``/var/lib/kafka``, ``file:///var/lib/kafka``)
or an object-store URL (``s3://bucket/prefix``). Joining, splitting and comparing work on
both without touching anything, so the rest of the code keeps passing strings around.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass

from compactor.errors import ConfigError

OBJECT_SCHEMES = ("s3",)
# Schemes Spark clusters use that this release names but does not write to: an error that
# says so beats a "no such file" about a directory called "gs:".
UNSUPPORTED_SCHEMES = {
    "gs": "Google Cloud Storage",
    "abfs": "Azure Data Lake Storage",
    "abfss": "Azure Data Lake Storage",
    "hdfs": "HDFS",
    "s3a": "S3 through Hadoop's s3a connector",
}
_SCHEME_SEP = "://"


def scheme_of(path: str) -> str | None:
    head, sep, _ = path.partition(_SCHEME_SEP)
    return head.lower() if sep and head.isalnum() else None


def is_url(path: str) -> bool:
    """True for an object-store location (``s3://...``)."""
    return scheme_of(path) in OBJECT_SCHEMES


def check_location(path: str) -> str:
    """``path`` as every command accepts it: a plain path, ``file://`` (made a plain path) or
    ``s3://bucket[/prefix]`` (trailing ``/`` dropped).

    Raises:
        ConfigError: an unknown or unsupported scheme, or an ``s3://`` URL without a bucket.
    """
    scheme = scheme_of(path)
    if scheme is None:
        return path
    if scheme == "file":
        return path[len("file://"):] or "/"
    if scheme in UNSUPPORTED_SCHEMES:
        raise ConfigError(
            f"{path}: {UNSUPPORTED_SCHEMES[scheme]} ({scheme}://) is not supported by this "
            f"release", path=path,
            remedy="use s3:// (any S3-compatible store, e.g. GCS's XML API at "
                   "https://storage.googleapis.com with HMAC keys) or a mounted path")
    if scheme not in OBJECT_SCHEMES:
        raise ConfigError(f"{path}: unknown storage scheme {scheme}://", path=path,
                          remedy="use a local path, file://, or s3://bucket/prefix")
    bucket, _ = split(path)
    if not bucket:
        raise ConfigError(f"{path}: an s3:// URL needs a bucket (s3://bucket/prefix)", path=path)
    return path.rstrip("/") if path.count("/") > 2 else path


def split(url: str) -> tuple[str, str]:
    """``(bucket, key)`` of ``s3://bucket/key`` (key without leading or trailing ``/``)."""
    rest = url.partition(_SCHEME_SEP)[2]
    bucket, _, key = rest.partition("/")
    return bucket, key.strip("/")


def join(first: str, *parts: str) -> str:
    if is_url(first):
        return "/".join([first.rstrip("/"), *(p.strip("/") for p in parts)])
    return posixpath.join(first, *parts)


def basename(path: str) -> str:
    if is_url(path):
        return path.rstrip("/").rpartition("/")[2]
    return posixpath.basename(posixpath.normpath(path))


def dirname(path: str) -> str:
    if is_url(path):
        bucket, key = split(path)
        scheme = scheme_of(path)
        parent = key.rpartition("/")[0]
        return f"{scheme}://{bucket}" + (f"/{parent}" if parent else "")
    return posixpath.dirname(posixpath.normpath(path))


def url_contains(outer: str, inner: str) -> bool:
    """Whether the URL ``inner`` is ``outer`` or lies under it."""
    a, b = outer.rstrip("/"), inner.rstrip("/")
    return b == a or b.startswith(a + "/")


# ---------------------------------------------------------------------------------------------
# --storage-option KEY=VALUE


@dataclass(frozen=True, slots=True)
class _OptionSpec:
    help: str
    check: str = "text"  # "text" or "positive" (a number above zero)


STORAGE_OPTIONS: Mapping[str, _OptionSpec] = {
    "endpoint_url": _OptionSpec("S3 endpoint, e.g. http://127.0.0.1:8333 (default: "
                                "AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, else AWS)"),
    "region": _OptionSpec("region (default: AWS_REGION / AWS_DEFAULT_REGION / the profile)"),
    "profile": _OptionSpec("profile in ~/.aws/config (default: AWS_PROFILE)"),
    "access_key_id": _OptionSpec("access key (default: AWS_ACCESS_KEY_ID / the profile)"),
    "secret_access_key": _OptionSpec("secret key (default: AWS_SECRET_ACCESS_KEY)"),
    "session_token": _OptionSpec("session token (default: AWS_SESSION_TOKEN)"),
    "addressing_style": _OptionSpec("path, virtual or auto (default auto: path style for "
                                    "custom endpoints)"),
    "part_size_mb": _OptionSpec("multipart upload part size in MiB (default 8, 5 to 5120)",
                                "positive"),
    "read_ahead_mb": _OptionSpec("bytes a segment reader fetches per ranged GET, in MiB "
                                 "(default 8, 0.001 to 1024)", "positive"),
    "lease_seconds": _OptionSpec("lifetime of the log dir lease, renewed every third of it; "
                                 "a run stops changing the log dir once a quarter of it is "
                                 "left unrenewed (default 60, 1 to 3600)", "positive"),
}


# The range of each number (S3 parts are 5 MiB to 5 GiB; a lease must outlive the requests
# that renew it, and one that outlives an hour keeps a crashed run's log dir locked too long).
_BOUNDS = {"part_size_mb": (5.0, 5120.0), "read_ahead_mb": (0.001, 1024.0),
           "lease_seconds": (1.0, 3600.0)}


def parse_storage_options(pairs: Mapping[str, str]) -> dict[str, str]:
    """Validate ``--storage-option`` pairs: unknown keys and bad values are errors.

    Raises:
        ConfigError: naming the key and the keys that exist.
    """
    out = {}
    for key, value in pairs.items():
        spec = STORAGE_OPTIONS.get(key)
        if spec is None:
            raise ConfigError(f"unknown --storage-option {key!r}",
                              remedy="use one of: " + ", ".join(sorted(STORAGE_OPTIONS)))
        if spec.check == "positive":
            low, high = _BOUNDS[key]
            try:
                ok = low <= float(value) <= high  # NaN and inf fail here too
            except ValueError:
                ok = False
            if not ok:
                raise ConfigError(f"--storage-option {key}={value}: expected a number from "
                                  f"{low:g} to {high:g}", remedy=spec.help)
        if key == "addressing_style" and value not in ("path", "virtual", "auto"):
            raise ConfigError(f"--storage-option addressing_style={value}: expected path, "
                              f"virtual or auto")
        if key == "endpoint_url" and not value.startswith(("http://", "https://")):
            raise ConfigError(f"--storage-option endpoint_url={value}: expected an http:// or "
                              f"https:// URL")
        out[key] = value
    return out
