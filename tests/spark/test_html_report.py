"""``--html-report`` and ``compactor report --html``: the page renders in headless Chromium
(Debian's ``chromium``), the screenshot is not blank, and the page's text holds the run's
figures as the JSON report gives them; nothing on the page is fetched from a network."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest

from compactor.errors import EXIT_CONFIG, EXIT_OK
from compactor.human import human_bytes
from compactor.tools.ops.generator import DEFAULT_START_MS
from tests.helpers import cli_json

pytestmark = pytest.mark.spark

DAY = 86_400_000
NOW = DEFAULT_START_MS + 3 * DAY
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars")


def _chromium(page: Path, tmp: Path, *args: str) -> subprocess.CompletedProcess:
    assert Path(CHROMIUM).exists(), "Debian's chromium is needed (make test installs it)"
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp / 'profile'}", *args,
                           page.as_uri()], capture_output=True, timeout=120)


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self.external: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._skip += tag in ("style", "script")
        for name, value in attrs:
            if name in ("src", "href") and value and not value.startswith("#"):
                self.external.append(value)

    def handle_endtag(self, tag: str) -> None:
        self._skip -= tag in ("style", "script")

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.parts.append(data)


def _rendered_text(page: Path, tmp: Path) -> tuple[str, list[str]]:
    """The text of the DOM Chromium built from the page, and any external references."""
    res = _chromium(page, tmp, "--dump-dom")
    assert res.returncode == 0, res.stderr[-2000:]
    parser = _Text()
    parser.feed(res.stdout.decode())
    return re.sub(r"\s+", " ", " ".join(parser.parts)), parser.external


def _inked_fraction(png: bytes) -> float:
    """The fraction of pixels of an 8-bit RGB(A) PNG that are not near-white (PNG filters
    undone per the PNG specification, section 9)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height, channels = 8, b"", 0, 0, 0
    while pos < len(png):
        (length,), kind = struct.unpack(">I", png[pos:pos + 4]), png[pos + 4:pos + 8]
        body = png[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and colour in (2, 6)
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw, stride = zlib.decompress(idat), width * channels
    previous, inked = bytearray(stride), 0
    for row in range(height):
        kind, line = raw[row * (stride + 1)], bytearray(raw[row * (stride + 1) + 1:
                                                           (row + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b, c = previous[i], previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + a) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + b) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) \
                    & 0xFF
        inked += sum(1 for x in range(0, stride, channels) if min(line[x:x + 3]) < 200)
        previous = line
    return inked / (width * height)


def test_the_html_report_renders_with_the_run_figures(spark, small_log: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    page, state = tmp_path / "compact.html", tmp_path / "state"
    code, report = cli_json(capsys, "compact", "--assume-kafka-defaults", str(small_log),
                            "--now-ms", str(NOW),
                            "--config", "cleanup.policy=compact,delete", "--json",
                            "--state-dir", str(state), "--html-report", str(page))
    assert code == EXIT_OK
    text, external = _rendered_text(page, tmp_path)
    assert external == []  # self-contained: nothing to fetch at view time
    cleaned = [p for p in report["partitions"] if p["status"] == "cleaned"]
    assert cleaned
    for p in cleaned:
        assert f"{p['topic']}-{p['partition']} cleaned {p['records_in']:,} {p['records_out']:,} " \
               f"{human_bytes(p['bytes_in'])} {human_bytes(p['bytes_out'])}" in text, text[:3000]
        assert p["explanation"] in text
    total_in = human_bytes(sum(p["bytes_in"] for p in cleaned))
    total_out = human_bytes(sum(p["bytes_out"] for p in cleaned))
    assert f"{total_in} → {total_out}" in text
    for stage, seconds in report["stages_s"].items():
        assert f"{stage} {seconds:.1f} s" in text
    for heading in ("Bytes before and after", "Records dropped, by reason",
                    "Dirty ratio against min.cleanable.dirty.ratio", "Stage timeline"):
        assert heading in text

    shot = tmp_path / "compact.png"
    res = _chromium(page, tmp_path, "--window-size=1200,1400", f"--screenshot={shot}")
    assert res.returncode == 0, res.stderr[-2000:]
    assert _inked_fraction(shot.read_bytes()) > 0.02  # text, tables and bars, not a blank page

    # retention, then the page of a recorded run from the runs table
    code, retained = cli_json(capsys, "retain", "--assume-kafka-defaults", str(small_log),
                              "--now-ms", str(NOW + 30 * DAY),
                              "--config", "cleanup.policy=compact,delete", "--json",
                              "--state-dir", str(state))
    assert code == EXIT_OK
    from compactor.cli import main

    recorded = tmp_path / "recorded.html"
    assert main(["report", "--state-dir", str(state), "--html", str(recorded)]) == EXIT_OK
    text, _ = _rendered_text(recorded, tmp_path)
    assert retained["run_id"] in text and "Segments deleted, by reason" in text
    for p in retained["partitions"]:
        for reason, v in (p.get("deleted_by_reason") or {}).items():
            if v["segments"]:
                assert f"{reason}: {v['segments']} ({human_bytes(v['bytes'])})" in text
    assert main(["report", "--state-dir", str(state), "--run-id", report["run_id"],
                 "--html", str(recorded)]) == EXIT_OK
    text, _ = _rendered_text(recorded, tmp_path)
    assert report["run_id"] in text and all(p["explanation"] in text for p in cleaned)
    assert main(["report", "--state-dir", str(state), "--run-id", "no-such-run",
                 "--html", str(recorded)]) == EXIT_CONFIG
    assert retained["run_id"] in capsys.readouterr().err  # the message lists the newest ids


class _Rows(HTMLParser):
    """Table rows in the page, and those outside every (collapsed) ``<details>``."""

    def __init__(self) -> None:
        super().__init__()
        self.rows = self.open_rows = self._details = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._details += tag == "details"
        if tag == "tr":
            self.rows += 1
            self.open_rows += not self._details

    def handle_endtag(self, tag: str) -> None:
        self._details -= tag == "details"


def test_a_broker_of_2000_partitions_shows_what_needs_attention_then_its_topics(
        spark, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 30.5: 40 topics of 50 partitions (half compacted, half deleted), one partition
    with a corrupt segment. The page opens with that partition, then one row per topic (the
    one needing attention first), counts each partition once though a run reports it twice,
    and collapses the partition lines: a screen, not 4,000 rows."""
    from compactor.tools.ops.generator import GeneratorConfig, generate

    logs = tmp_path / "logs"
    topics = tuple(f"topic-{i:02d}" for i in range(40))
    generate(str(logs), GeneratorConfig(
        topics=topics, partitions=50, records_per_partition=12, distinct_keys=4,
        segment_bytes=1024, legacy_records=0, open_transaction=False, seed=3,
        topic_configs={t: {"cleanup.policy": "compact" if i % 2 else "delete"}
                       for i, t in enumerate(topics)}))
    segment = sorted((logs / "topic-07-3").glob("*.log"))[0]
    data = bytearray(segment.read_bytes())
    data[len(data) // 2] ^= 0xFF
    segment.write_bytes(bytes(data))
    page = tmp_path / "broker.html"
    code, report = cli_json(capsys, "run", "--assume-kafka-defaults", str(logs), "--dry-run",
                            "--now-ms", str(DEFAULT_START_MS + 20 * DAY), "--json",
                            "--html-report", str(page))
    assert code == 6  # partial: one partition corrupt, the others planned
    text, external = _rendered_text(page, tmp_path)
    assert external == []
    first = {h: text.index(h) for h in ("Needs attention: 1", "By topic", "Compaction",
                                        "Retention")}
    assert list(first) == sorted(first, key=first.get), first  # in this order
    assert re.search(r"Needs attention: 1 partition step status why topic-07-3 plan corrupt",
                     text), text[:1500]
    rollup = text[first["By topic"]:first["Compaction"]]
    assert rollup.split("records erased ")[1].startswith("topic-07 50 "), rollup[:300]
    assert "partitions 2,001" in text  # every partition once (and the metadata log)
    rows = _Rows()
    rows.feed(page.read_text())
    assert rows.rows > 4000 and rows.open_rows < 100, (rows.rows, rows.open_rows)

    shot = tmp_path / "broker.png"
    res = _chromium(page, tmp_path, "--window-size=1200,1400", f"--screenshot={shot}")
    assert res.returncode == 0, res.stderr[-2000:]
    assert _inked_fraction(shot.read_bytes()) > 0.02


@pytest.mark.slow
def test_the_erasure_proof_page_is_one_document_an_auditor_can_read(
        spark, small_log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 53.4: ``erase report --html FILE`` renders in headless Chromium, self-contained,
    with the request and its digest (never the subject), every place with its times, the runs
    per partition, the ledger's commits and the deadline's outcome, as the JSON proof gives
    them; the text report says the same in words."""
    import hashlib

    from compactor.cli import main
    from compactor.human import human_time
    from tests.helpers import init_ledger

    state, page, subject = tmp_path / "state", tmp_path / "proof.html", b"key-00000007"
    init_ledger(state)
    assert main(["erase", "request", "--state-dir", str(state), "--topic", "*", "--key",
                 subject.decode(), "--request-id", "ticket-53", "--reason", "PRIV-53 art. 17",
                 "--now-ms", str(NOW)]) == EXIT_OK
    for action, at in (("apply", NOW + 1000), ("verify", NOW + 2000)):
        assert main(["erase", action, "--assume-kafka-defaults", str(small_log), "--state-dir",
                     str(state), "--now-ms", str(at), "--json"]) == EXIT_OK
    capsys.readouterr()
    code, proof = cli_json(capsys, "erase", "report", "--state-dir", str(state),
                           "--request-id", "ticket-53", "--json", "--html", str(page))
    assert code == EXIT_OK and proof["proof"]["status"] == "verified"
    assert subject not in page.read_bytes()  # only its digest
    text, external = _rendered_text(page, tmp_path)
    assert external == []
    assert "Erasure proof · request ticket-53 verified" in text
    assert hashlib.sha256(subject).hexdigest() in text and "PRIV-53 art. 17" in text
    assert "met: verified " + human_time(NOW + 2000) in text
    for place in proof["proof"]["places"].values():
        assert place["log_dir"] in text and human_time(place["applied_at_ms"]) in text
    runs = proof["apply_runs"] + proof["verify_runs"]
    assert runs
    for r in runs:
        assert f"{r['run_id']} {r['topic']}-{r['partition']}" in text
    for c in proof["ledger_commits"]:
        assert f"{c['version']} {human_time(c['timestamp_ms'])} {c['operation']} " \
               f"{c['action']}" in text
    shot = tmp_path / "proof.png"
    res = _chromium(page, tmp_path, "--window-size=1200,1400", f"--screenshot={shot}")
    assert res.returncode == 0, res.stderr[-2000:]
    assert _inked_fraction(shot.read_bytes()) > 0.02

    # `compactor report` picks a run by kind: by default a maintenance run, never the
    # newest erasure page
    recorded = tmp_path / "recorded.html"
    assert main(["report", "--state-dir", str(state), "--html", str(recorded)]) == EXIT_CONFIG
    assert "no maintenance run recorded here (newest: erase_verify" in capsys.readouterr().err
    assert main(["report", "--state-dir", str(state), "--kind", "erase_apply", "--html",
                 str(recorded)]) == EXIT_OK
    assert f"erase_apply run {proof['apply_runs'][0]['run_id']}" in capsys.readouterr().out

    # the same proof in words: times and places, no Python values
    assert main(["erase", "report", "--state-dir", str(state), "--request-id",
                 "ticket-53"]) == EXIT_OK
    said = capsys.readouterr().out
    assert "deadline met: verified " in said and "True" not in said and "{" not in said
    assert f"applied {human_time(NOW + 1000)}" in said
