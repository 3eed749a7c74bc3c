"""The five Kafka compression codecs (Kafka's ``CompressionType``), for writing and for legacy
reads.

Stream formats follow Kafka's own writers so that every Kafka client can read what we write:

* gzip: an RFC 1952 stream (default level 6, Kafka's ``compression.gzip.level`` default);
* snappy: the xerial ``snappy-java`` framed stream (magic header, then 4-byte big-endian
  length-prefixed raw snappy blocks of 32 KiB); plain raw snappy is accepted on read;
* lz4: an LZ4 frame with 64 KiB independent blocks and no checksums. Kafka's default level (9)
  takes lz4's fast compressor, any other level LZ4HC at that level
  (``Lz4BlockOutputStream``'s constructor), and the cleaner always writes the default
  (``MemoryRecords.buildRetainedRecordsInto``: ``Compression.of(type).build()``). For magic
  0 messages Kafka computed the frame-descriptor checksum over the magic number as well (a bug
  kept for compatibility); we write and accept that "broken" checksum for magic 0;
* zstd: a zstd frame (default level 3), v2 batches only.

Compressed bytes depend on library versions; tests compare decompressed content only.
"""

from __future__ import annotations

import gzip
import struct
import zlib
from enum import IntEnum

import cramjam
import lz4.frame
import xxhash
import zstandard


class Codec(IntEnum):
    """Compression codec ids stored in attribute bits 0-2."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


CODEC_MASK = 0x07
KNOWN_CODECS = frozenset(int(c) for c in Codec)
DEFAULT_LEVELS = {Codec.GZIP: 6, Codec.LZ4: 9, Codec.ZSTD: 3}

_XERIAL_HEADER = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024
_LZ4_MAGIC = b"\x04\x22\x4d\x18"


class DecompressionError(ValueError):
    """Compressed bytes that the codec cannot decode (wrapped by the segment reader)."""


def codec_name(codec_id: int) -> str:
    """Kafka's name for a codec id, or ``unknown(<id>)``."""
    try:
        return Codec(codec_id).name.lower()
    except ValueError:
        return f"unknown({codec_id})"


def compress(codec: int, data: bytes, *, level: int | None = None, magic: int = 2) -> bytes:
    """Compress ``data`` with Kafka's stream format for ``codec``.

    Args:
        codec: a :class:`Codec` id other than ``NONE``.
        data: the uncompressed record list (v2) or inner message set (v0/v1).
        level: codec level; ``None`` uses Kafka's default for the codec.
        magic: message format; only changes the lz4 header checksum (magic 0 quirk).
    """
    if level is None:
        level = DEFAULT_LEVELS.get(Codec(codec), 0)
    if codec == Codec.GZIP:
        # java.util.zip.GZIPOutputStream's header (Kafka's GzipCompression): mtime 0, no extra
        # flags and OS 255 ("unknown"; Python writes 3, Unix): the same deflate stream then
        # gives the same bytes as Kafka's cleaner writes
        stream = gzip.compress(data, compresslevel=level, mtime=0)
        return stream[:9] + b"\xff" + stream[10:]
    if codec == Codec.SNAPPY:
        out = [_XERIAL_HEADER]
        for start in range(0, len(data), _XERIAL_BLOCK):
            block = bytes(cramjam.snappy.compress_raw(data[start : start + _XERIAL_BLOCK]))
            out.append(struct.pack(">i", len(block)))
            out.append(block)
        return b"".join(out)
    if codec == Codec.LZ4:
        if level in (1, 2):
            raise ValueError(f"lz4 level {level} is LZ4HC in Kafka and lz4's fast compressor in "
                             "python-lz4's frame: not written (Kafka's cleaner uses level 9)")
        frame = lz4.frame.compress(
            data,
            # python-lz4's level 0 is lz4's fast compressor (LZ4_compress_default), which
            # Kafka's Lz4BlockOutputStream takes for its default level; levels of 3 and more
            # are LZ4HC, as lz4-java's highCompressor(level)
            compression_level=0 if level == DEFAULT_LEVELS[Codec.LZ4] else level,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
        if magic == 0:
            frame = _with_lz4_header_checksum(frame, broken=True)
        return frame
    if codec == Codec.ZSTD:
        if magic < 2:
            raise ValueError("zstd is only allowed with magic 2 record batches")
        # Kafka's ZstdCompression streams through zstd-jni's ZstdOutputStream behind a
        # BufferedOutputStream: one compress call, a flush (a block that is not the last), then
        # the end of the frame (an empty last block); no content size, no checksum
        cobj = zstandard.ZstdCompressor(level=level, write_content_size=False).compressobj()
        return (cobj.compress(data) + cobj.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
                + cobj.flush(zstandard.COMPRESSOBJ_FLUSH_FINISH))
    raise ValueError(f"cannot compress with codec id {codec}")


def decompress(codec: int, data: bytes | memoryview, *, magic: int = 2) -> bytes:
    """Inverse of :func:`compress`; raises :class:`DecompressionError` on bad input. ``data``
    may be a view of a mapped segment (the writer's chunks: ``storage.window``)."""
    # Only what each decoder raises on bad bytes becomes a DecompressionError: anything else
    # (an I/O error, a bug) is not evidence of a corrupt segment and propagates as itself.
    try:
        if codec == Codec.GZIP:
            return gzip.decompress(data)
        if codec == Codec.SNAPPY:
            return _snappy_decompress(data)
        if codec == Codec.ZSTD:
            return _zstd_decompress(data)
    except (gzip.BadGzipFile, EOFError, zlib.error, zstandard.ZstdError,
            cramjam.DecompressionError) as err:
        raise DecompressionError(f"{codec_name(codec)} stream cannot be decoded: {err}") from err
    if codec == Codec.LZ4:
        if magic == 0:
            data = _with_lz4_header_checksum(bytes(data), broken=False)
        try:
            return bytes(lz4.frame.decompress(data))
        except RuntimeError as err:  # python-lz4 reports every frame error as RuntimeError
            raise DecompressionError(f"lz4 frame cannot be decoded: {err}") from err
    raise DecompressionError(f"unknown compression codec id {codec}")


def _snappy_decompress(data: bytes | memoryview) -> bytes:
    if data[:8] != _XERIAL_HEADER[:8]:
        return bytes(cramjam.snappy.decompress_raw(data))
    pos = len(_XERIAL_HEADER)
    out = []
    while pos < len(data):
        if pos + 4 > len(data):
            raise DecompressionError("xerial snappy block length is truncated")
        (size,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if size < 0 or pos + size > len(data):
            raise DecompressionError(f"xerial snappy block of {size} bytes runs past the end")
        out.append(bytes(cramjam.snappy.decompress_raw(data[pos : pos + size])))
        pos += size
    return b"".join(out)


def _zstd_decompress(data: bytes | memoryview) -> bytes:
    # Frames written by streaming compressors carry no content size; decompressobj copes.
    dobj = zstandard.ZstdDecompressor().decompressobj()
    out = dobj.decompress(data)
    if not dobj.eof:
        raise DecompressionError("zstd frame is truncated")
    return out


def _with_lz4_header_checksum(frame: bytes, *, broken: bool) -> bytes:
    """Rewrite the LZ4 frame-descriptor checksum byte.

    ``broken=True`` computes it the way Kafka's magic-0 writer did (over magic, FLG and BD);
    ``broken=False`` computes the standard one (over FLG and BD only).
    """
    if len(frame) < 7 or frame[:4] != _LZ4_MAGIC:
        raise DecompressionError("not an LZ4 frame")
    header_end = 6 + (8 if frame[4] & 0x08 else 0)  # FLG, BD, optional content size
    covered = frame[0:header_end] if broken else frame[4:header_end]
    checksum = (xxhash.xxh32_intdigest(covered) >> 8) & 0xFF
    return frame[:header_end] + bytes([checksum]) + frame[header_end + 1 :]
