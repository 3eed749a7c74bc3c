"""Rolling maintenance beside a live cluster: one broker at a time, stopped, maintained offline,
started, and caught up before the next.

A running broker locks its log dirs (``.lock``) and serves them; the tool works on a stopped
broker's dirs. For each broker of the plan, in order:

1. ``check``: through the admin API (:mod:`compactor.cluster.admin`), every broker of the plan
   is registered and no partition is under-replicated, so stopping this one never takes a
   second copy of anything down (a broker's replicas are followers elsewhere while it is
   down: its leaders move, as in any rolling restart); with ``erase`` and a broker whose
   remote tier is on (KIP-405), the remote step of the erasure while it still runs
   (``erase apply --remote``: the cluster publishes the replaced segments' metadata);
2. ``stop``: the user's command (systemd, kubectl, a script), then wait until every one of its
   log dirs' ``.lock`` is free (the broker process is gone);
3. ``recover`` each log dir, ``run`` (compaction and retention per topic policy; configs from
   the broker's own ``server.properties`` and metadata log), and with ``erase`` the ledger's
   pending requests (``erase apply``, ``erase verify``): each a ``compactor`` process of its
   own, so that nothing it does can leave the broker down;
4. ``start``: the user's command, then ``in_sync``: wait until the broker is registered and in
   the ISR of every partition it replicates.

Any failure stops the roll: a broker this roll stopped is started again (its log dirs hold the
old or the new files, never a mix: the commands are crash-safe) and waited for, and no further
broker is touched. The report names the step, its exit code and its own report.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from compactor.cluster import admin
from compactor.errors import EXIT_OK, ClusterNotReadyError, ConfigError, LogDirLockedError
from compactor.log import storage
from compactor.log.layout import read_properties
from compactor.remote import tier


@dataclass(frozen=True, slots=True)
class Broker:
    """One broker of the plan: how to stop and start it, and where its data is."""

    name: str
    node_id: int
    server_properties: str
    stop: str | tuple[str, ...]  # a shell command line, or an argv
    start: str | tuple[str, ...]
    log_dirs: tuple[str, ...] = ()  # default: log.dirs of server_properties


@dataclass(frozen=True, slots=True)
class Plan:
    """A rolling maintenance plan (``compactor rolling --config FILE``, a YAML file)."""

    bootstrap_servers: str
    brokers: tuple[Broker, ...]
    state_dir: str | None = None
    erase: bool = False
    # the stop command and the release of the log dirs' locks after it
    stop_timeout_s: float = 300.0
    # the start command itself: it must return once the broker is launched
    start_timeout_s: float = 300.0
    # the broker back in the ISR of every partition it replicates
    in_sync_timeout_s: float = 1800.0
    # each maintenance command (recover, run, erase apply/verify) on the stopped broker
    command_timeout_s: float = 3600.0
    poll_s: float = 2.0
    # arguments every maintenance command gets (say ["--master", "spark://..."])
    extra_args: tuple[str, ...] = ()
    source: str = field(default="", compare=False)


_BROKER_KEYS = {"name", "node_id", "server_properties", "stop", "start", "log_dirs"}
_PLAN_KEYS = {"bootstrap_servers", "brokers", "state_dir", "erase", "stop_timeout_s",
              "start_timeout_s",
              "in_sync_timeout_s", "command_timeout_s", "poll_s", "extra_args"}


def parse_plan(data: Any, source: str) -> Plan:
    """The plan in ``data`` (the YAML file's content).

    Raises:
        ConfigError: naming the field and what is wrong with it.
    """
    def fail(message: str) -> ConfigError:
        return ConfigError(f"{source}: {message}", path=source,
                           remedy="fix the plan file; nothing was stopped or changed")

    if not isinstance(data, Mapping):
        raise fail("expected a mapping with bootstrap_servers and brokers")
    unknown = sorted(set(data) - _PLAN_KEYS)
    if unknown:
        raise fail(f"unknown field(s) {', '.join(unknown)} "
                   f"(known: {', '.join(sorted(_PLAN_KEYS))})")
    if not isinstance(data.get("bootstrap_servers"), str) or not data["bootstrap_servers"]:
        raise fail("bootstrap_servers is missing (host:port of the cluster's listeners, as "
                   "clients give it)")
    entries = data.get("brokers")
    if not isinstance(entries, list) or not entries:
        raise fail("brokers: expected a list of brokers")
    brokers = []
    for i, b in enumerate(entries):
        where = f"brokers[{i}]"
        if not isinstance(b, Mapping):
            raise fail(f"{where}: expected a mapping")
        unknown = sorted(set(b) - _BROKER_KEYS)
        if unknown:
            raise fail(f"{where}: unknown field(s) {', '.join(unknown)}")
        for key in ("name", "server_properties"):
            if not isinstance(b.get(key), str) or not b[key]:
                raise fail(f"{where}: {key} is missing")
        if isinstance(b.get("node_id"), bool) or not isinstance(b.get("node_id"), int):
            raise fail(f"{where} ({b['name']}): node_id must be the broker's node.id")
        commands: dict[str, str | tuple[str, ...]] = {}
        for key in ("stop", "start"):
            value = b.get(key)
            if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
                commands[key] = tuple(value)
            elif isinstance(value, str) and value.strip():
                commands[key] = value
            else:
                raise fail(f"{where} ({b['name']}): {key} is missing: the command that "
                           f"{key}s this broker (a shell line or a list of arguments)")
        log_dirs = b.get("log_dirs") or []
        if not isinstance(log_dirs, list) or not all(isinstance(d, str) for d in log_dirs):
            raise fail(f"{where} ({b['name']}): log_dirs must be a list of paths")
        brokers.append(Broker(name=b["name"], node_id=b["node_id"],
                              server_properties=b["server_properties"], stop=commands["stop"],
                              start=commands["start"], log_dirs=tuple(log_dirs)))
    for what in ("name", "node_id"):
        values = [getattr(b, what) for b in brokers]
        twice = sorted({str(v) for v in values if values.count(v) > 1})
        if twice:
            raise fail(f"brokers: {what} {', '.join(twice)} is used twice")
    numbers = {}
    for key in ("stop_timeout_s", "start_timeout_s", "in_sync_timeout_s", "command_timeout_s",
                "poll_s"):
        if key in data:
            value = data[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise fail(f"{key}: {value!r} is not a positive number of seconds")
            numbers[key] = float(value)
    extra = data.get("extra_args") or []
    if not isinstance(extra, list) or not all(isinstance(a, str) for a in extra):
        raise fail("extra_args must be a list of arguments")
    state_dir = data.get("state_dir")
    if state_dir is not None and not isinstance(state_dir, str):
        raise fail("state_dir must be a path")
    if not isinstance(data.get("erase", False), bool):
        raise fail("erase must be true or false")
    if data.get("erase") and not state_dir:
        raise fail("erase: true needs state_dir (the ledger)")
    return Plan(bootstrap_servers=data["bootstrap_servers"], brokers=tuple(brokers),
                state_dir=state_dir, erase=bool(data.get("erase", False)),
                extra_args=tuple(extra), source=source, **numbers)


def load_plan(path: str) -> Plan:
    """The plan in the YAML file ``path``.

    Raises:
        ConfigError: the file is missing, unreadable or not a valid plan.
    """
    import yaml

    if not storage.exists(path):
        raise ConfigError(f"no rolling plan at {path}", path=path,
                          remedy="give --config the plan's YAML file (docs/reference.md, "
                                 "compactor rolling); nothing was stopped")
    try:
        data = yaml.safe_load(storage.read_text(path))
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not YAML: {err}", path=path) from None
    return parse_plan(data, path)


def broker_log_dirs(broker: Broker) -> list[str]:
    """The broker's log dirs: as given, else ``log.dirs`` (or ``log.dir``) of its
    ``server.properties``, as ``KafkaConfig.logDirs`` reads them."""
    if broker.log_dirs:
        return list(broker.log_dirs)
    from compactor.log.layout import server_log_dirs

    return server_log_dirs(broker.server_properties)


# -- the roll ------------------------------------------------------------------------------


class _Failed(Exception):
    """A step failed: the roll stops (after starting a broker it stopped)."""


@dataclass
class _Broker:
    """The report line of one broker while it rolls."""

    broker: Broker
    announce: Callable[[str], None] = lambda line: None
    steps: list[dict[str, Any]] = field(default_factory=list)
    stopped: bool = False

    def begin(self, name: str, what: str = "") -> float:
        """Say that step ``name`` starts (and what it runs); its start time."""
        self.announce(f"{self.broker.name}: {name}: started{': ' + what if what else ''}")
        return time.monotonic()

    def step(self, name: str, started: float, status: str, said: str = "",
             **detail: Any) -> None:
        """Record how step ``name`` ended, and say it (with ``said``: what it did)."""
        seconds = round(time.monotonic() - started, 3)
        self.steps.append({"step": name, "status": status, "seconds": seconds, **detail})
        if status != "would_run":
            self.announce(f"{self.broker.name}: {name}: {status} in {seconds:.1f} s"
                          + (f": {said}" if said else ""))


def _run_command(command: Sequence[str] | str, timeout_s: float) -> tuple[int, str]:
    """Run a stop or start command (a string through ``/bin/sh -c``) until it exits: its exit
    code and the tail of its output. The output goes to a file, not a pipe: a start command
    that backgrounds the broker (``nohup kafka-server-start.sh ... &``) leaves descendants
    holding its output open for as long as they live, and reading a pipe to its end would wait
    for them. A command still running after ``timeout_s`` is killed (its descendants are not:
    one of them may be the broker)."""
    with tempfile.TemporaryFile() as output:
        try:
            proc = subprocess.Popen(command, shell=isinstance(command, str),
                                    stdin=subprocess.DEVNULL, stdout=output,
                                    stderr=subprocess.STDOUT)
        except OSError as err:
            return -1, f"could not run: {err}"
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            code = None
        output.seek(0)
        tail = output.read()[-2000:].decode(errors="replace")
    if code is None:
        return -1, f"did not exit within {timeout_s:.0f} s (a start command must return once " \
                   f"the broker is launched){': ' + tail if tail else ''}"
    return code, tail


def roll(plan: Plan, *, clock: Sequence[str] = (), only: Sequence[str] = (),
         dry_run: bool = False,
         announce: Callable[[str], None] = lambda line: None) -> dict[str, Any]:
    """Roll the plan's brokers (those named in ``only``, else all) in order; returns the
    report (``status`` ``ok`` or ``failed``, one line per broker with its steps). ``clock``:
    the maintenance commands' clock arguments (``--now-ms``, ``--allow-past-now``)."""
    names = {b.name for b in plan.brokers}
    wrong = [n for n in only if n not in names]
    if wrong:
        raise ConfigError(f"no broker {', '.join(wrong)} in {plan.source} (brokers: "
                          f"{', '.join(sorted(names))})", path=plan.source)
    selected = [b for b in plan.brokers if not only or b.name in only]
    dirs = {b.name: broker_log_dirs(b) for b in selected}  # all known before anything stops
    for b in selected:
        if not dirs[b.name]:
            raise ConfigError(f"{b.name}: no log dir (log.dirs of {b.server_properties})",
                              path=b.server_properties)
    report: dict[str, Any] = {"type": "rolling", "command": "rolling", "plan": plan.source,
                              "dry_run": dry_run, "brokers": [], "status": "ok"}
    for broker in selected:
        line = _Broker(broker, announce)
        report["brokers"].append({"name": broker.name, "node_id": broker.node_id,
                                  "log_dirs": dirs[broker.name], "status": "ok",
                                  "steps": line.steps})
        announce(f"{broker.name}: rolling")
        try:
            _roll_one(plan, line, dirs[broker.name], clock, dry_run, announce)
        except _Failed:
            report["brokers"][-1]["status"] = "failed"
            report["status"] = "failed"
            break
    left = [b.name for b in selected][len(report["brokers"]):]
    report["not_started"] = left
    return report


def _roll_one(plan: Plan, line: _Broker, dirs: Sequence[str], clock: Sequence[str],
              dry_run: bool, announce: Callable[[str], None]) -> None:
    broker = line.broker
    started = line.begin("check", f"the cluster at {plan.bootstrap_servers}")
    try:
        state = admin.describe(plan.bootstrap_servers)
        problems = [f"broker {n} of the plan is not registered"
                    for n in admin.unregistered(state, [b.node_id for b in plan.brokers])]
        problems += admin.under_replicated(state)
    except ClusterNotReadyError as err:
        problems = [err.message]
    if problems:
        line.step("check", started, "failed", f"not stopped: {problems[0]}",
                  problems=problems[:20], problem_count=len(problems))
        raise _Failed
    line.step("check", started, "ok", f"{len(state.partitions)} partitions fully replicated",
              partitions=len(state.partitions))
    if dry_run:  # what the roll would run, in order
        for args in _online(plan, broker, dirs, clock):
            line.step(_step_name(args), time.monotonic(), "would_run",
                      command=" ".join(["compactor", *args]))
        line.step("stop", time.monotonic(), "would_run", command=_shown(broker.stop))
        for args in _maintenance(plan, broker, dirs, clock):
            line.step(_step_name(args), time.monotonic(), "would_run",
                      command=" ".join(["compactor", *args]))
        line.step("start", time.monotonic(), "would_run", command=_shown(broker.start))
        for s in line.steps[1:]:
            announce(f"{broker.name}: {s['step']}: would run: {s['command']}")
        return
    for args in _online(plan, broker, dirs, clock):
        _compactor_step(plan, line, args)
    try:
        started = line.begin("stop", _shown(broker.stop))
        code, output = _run_command(broker.stop, plan.stop_timeout_s)
        line.stopped = True  # from here on, the broker may be down: it is started again
        if code != 0:
            line.step("stop", started, "failed", f"exit code {code}", exit_code=code,
                      output=output)
            raise _Failed
        waited = _wait_unlocked(dirs, started + plan.stop_timeout_s, plan.poll_s)
        if waited:
            line.step("stop", started, "failed",
                      f"{waited} still locked after {plan.stop_timeout_s:.0f} s",
                      exit_code=code, output=f"the log dir stayed locked: {waited}")
            line.stopped = False  # still running: never start a second broker process
            raise _Failed
        line.step("stop", started, "ok", "the broker released its log dirs")
        for args in _maintenance(plan, broker, dirs, clock):
            _compactor_step(plan, line, args)
    finally:
        if line.stopped:
            _start_and_wait(plan, line)


def _start_and_wait(plan: Plan, line: _Broker) -> None:
    broker = line.broker
    started = line.begin("start", _shown(broker.start))
    code, output = _run_command(broker.start, plan.start_timeout_s)
    line.stopped = False
    if code != 0:
        line.step("start", started, "failed", output if code == -1 else f"exit code {code}",
                  exit_code=code, output=output)
        raise _Failed
    line.step("start", started, "ok")
    started = line.begin("in_sync", f"until broker {broker.node_id} is in the ISR of every "
                                    f"partition it replicates (at most "
                                    f"{plan.in_sync_timeout_s:.0f} s)")
    deadline = started + plan.in_sync_timeout_s
    lagging: list[str] = []
    while True:
        try:
            lagging = admin.not_in_sync(admin.describe(plan.bootstrap_servers), broker.node_id)
        except ClusterNotReadyError as err:
            lagging = [err.message]
        if not lagging:
            line.step("in_sync", started, "ok", "back in sync")
            return
        if time.monotonic() >= deadline:
            line.step("in_sync", started, "failed",
                      f"not back in sync after {plan.in_sync_timeout_s:.0f} s: {lagging[0]}",
                      lagging=lagging[:20], lagging_count=len(lagging))
            raise _Failed
        time.sleep(plan.poll_s)


def _wait_unlocked(dirs: Sequence[str], deadline: float, poll_s: float) -> str:
    """Wait until no process holds a lock on any of ``dirs``; the first still locked (empty
    when all are free)."""
    while True:
        locked = ""
        for d in dirs:
            try:
                with storage.log_dir_lock(d):
                    pass
            except LogDirLockedError:
                locked = d
                break
        if not locked or time.monotonic() >= deadline:
            return locked
        time.sleep(poll_s)


def _maintenance(plan: Plan, broker: Broker, dirs: Sequence[str],
                 clock: Sequence[str]) -> list[list[str]]:
    """The commands run on a stopped broker, in order."""
    cluster = ["--server-properties", broker.server_properties]
    state = ["--state-dir", plan.state_dir] if plan.state_dir else []
    out = [["recover", d] for d in dirs]
    out.append(["run", *dirs, *cluster, *state, *clock, *plan.extra_args])
    if plan.erase:
        for action in ("apply", "verify"):
            out.append(["erase", action, *dirs, *cluster, *state, *clock, *plan.extra_args])
    return out


def _online(plan: Plan, broker: Broker, dirs: Sequence[str],
            clock: Sequence[str]) -> list[list[str]]:
    """The commands run while the broker still serves: with ``erase``, when its
    ``server.properties`` turn its remote tier on, the remote step of the erasure."""
    if not plan.erase or not tier.enabled(read_properties(broker.server_properties)):
        return []
    state = ["--state-dir", plan.state_dir] if plan.state_dir else []
    return [["erase", "apply", *dirs, "--remote", "--bootstrap-server", plan.bootstrap_servers,
             "--server-properties", broker.server_properties, *state, *clock,
             *plan.extra_args]]


def _step_name(args: Sequence[str]) -> str:
    if args[0] != "erase":
        return args[0]
    return "_".join(args[:2]) + ("_remote" if "--remote" in args else "")


def _compactor_step(plan: Plan, line: _Broker, args: list[str]) -> None:
    """One ``compactor`` command in a process of its own; its JSON reports (one line per log
    dir) in the step."""
    name = _step_name(args)
    shown = " ".join(["compactor", *args])
    command = [sys.executable, "-m", "compactor.cli", *args, "--json", "--quiet"]
    started = line.begin(name, shown)
    try:
        proc = subprocess.run(command, capture_output=True, text=True, check=False,
                              timeout=plan.command_timeout_s)
        code, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired:
        code, stdout, stderr = -1, "", f"did not end within {plan.command_timeout_s:.0f} s"
    reports = [r for r in map(_json_line, stdout.splitlines()) if r is not None]
    detail: dict[str, Any] = {"exit_code": code, "command": shown,
                              "reports": [{k: r[k] for k in _REPORT_KEYS if k in r}
                                          for r in reports]}
    if code != EXIT_OK:
        detail["output"] = stderr[-2000:]
        line.step(name, started, "failed", f"exit code {code}: "
                  + (_last_line(stderr) or "no output"), **detail)
        raise _Failed
    line.step(name, started, "ok", _what_it_did(reports), **detail)


def _last_line(text: str) -> str:
    return next((t.strip() for t in reversed(text.splitlines()) if t.strip()), "")


def _what_it_did(reports: Sequence[Mapping[str, Any]]) -> str:
    """A step's outcome in words, from its commands' reports: partitions by status, requests
    by outcome, partitions recovered."""
    counts: dict[str, int] = {}
    for r in reports:
        for key in ("partitions_by_status", "requests_by_outcome"):
            for status, n in (r.get(key) or {}).items():
                counts[status] = counts.get(status, 0) + n
        for key in ("compaction", "retention"):  # run's two parts
            for status, n in ((r.get(key) or {}).get("partitions_by_status") or {}).items():
                counts[f"{key} {status}"] = counts.get(f"{key} {status}", 0) + n
        if r.get("partitions_recovered"):
            counts["recovered"] = counts.get("recovered", 0) + r["partitions_recovered"]
    return ", ".join(f"{status} {n}" for status, n in sorted(counts.items())) or "nothing to do"


# what a step keeps of each report its command printed
_REPORT_KEYS = ("log_dir", "status", "code", "message", "remedy", "partitions_by_status",
                "run_id", "exit_code", "partitions_recovered", "partitions_failed")


def _json_line(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _shown(command: Sequence[str] | str) -> str:
    return command if isinstance(command, str) else " ".join(command)
