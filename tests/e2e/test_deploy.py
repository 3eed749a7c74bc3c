"""Issue 53, item 9: the install route besides the repository. No container engine runs here, so
the image's build step runs as the script it is (``deploy/install.sh``, the Dockerfile's one
RUN of the package) into a prefix that stands for the image's ``/opt/kafka-compactor``; the
installation then runs a job through the image's entrypoint as a Kubernetes driver pod does,
and the Kubernetes examples are checked against the image's paths and the jobs' parsers."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

from compactor.cli.app import build_parser
from compactor.errors import EXIT_OK
from compactor.tools.ops.generator import DEFAULT_START_MS, GeneratorConfig, generate

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
IMAGE_HOME = "/opt/kafka-compactor"


def _version() -> str:
    return re.search(r'^version = "(.*)"', (REPO / "pyproject.toml").read_text(), re.M)[1]


def _dependencies() -> list[Requirement]:
    text = (REPO / "pyproject.toml").read_text()
    block = re.search(r"^dependencies = \[(.*?)^\]", text, re.M | re.S)[1]
    return [Requirement(r) for r in re.findall(r'"([^"]+)"', block)]


def _pins() -> dict[str, str]:
    pins = {}
    for line in (DEPLOY / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[name.lower().replace("_", "-")] = version
    return pins


def _dockerfile() -> tuple[list[str], dict[str, str]]:
    """The Dockerfile's RUN commands and its last ENV's settings."""
    text = (DEPLOY / "Dockerfile").read_text().replace("\\\n", " ")
    runs = [line[4:].strip() for line in text.splitlines() if line.startswith("RUN ")]
    envs = [line[4:] for line in text.splitlines() if line.startswith("ENV ")]
    settings = dict(pair.split("=", 1) for pair in shlex.split(envs[-1]))
    return runs, settings


def test_the_image_pins_every_dependency_within_pyproject() -> None:
    pins = _pins()
    for req in _dependencies():
        name = req.name.lower().replace("_", "-")
        assert name in pins, f"{req.name} is not pinned in deploy/constraints.txt"
        assert req.specifier.contains(pins[name], prereleases=True), (req, pins[name])


def test_the_examples_name_the_image_make_builds_and_its_paths() -> None:
    image = f"kafka-compactor:{_version()}"
    makefile = (REPO / "Makefile").read_text()
    assert "-t kafka-compactor:$(VERSION)" in makefile
    app = yaml.safe_load((DEPLOY / "k8s" / "sparkapplication.yaml").read_text())
    assert app["kind"] == "SparkApplication" and app["spec"]["image"] == image
    main = app["spec"]["mainApplicationFile"]
    assert main.startswith(f"local://{IMAGE_HOME}/jobs/")
    job = Path(main).stem
    assert (REPO / "jobs" / f"{job}.py").exists()
    from importlib import import_module
    import_module(f"jobs.{job}").build_parser().parse_args(app["spec"]["arguments"])
    account = app["spec"]["driver"]["serviceAccount"]
    rbac = list(yaml.safe_load_all((DEPLOY / "k8s" / "rbac.yaml").read_text()))
    assert {(d["kind"], d["metadata"]["name"]) for d in rbac} >= {("ServiceAccount", account)}
    (cron,) = yaml.safe_load_all((DEPLOY / "k8s" / "cronjob.yaml").read_text())
    (container,) = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    assert container["image"] == image and container["args"][0] == "compactor"
    build_parser().parse_args(container["args"][1:])
    runs, env = _dockerfile()
    assert f"/src/deploy/install.sh /src {IMAGE_HOME}" in " ".join(runs)
    assert env["KAFKA_COMPACTOR_HOME"] == IMAGE_HOME


@pytest.mark.slow
def test_the_images_install_step_makes_an_installation_that_runs_a_job(
        tmp_path: Path) -> None:
    """``deploy/install.sh`` as the Dockerfile runs it (PyPI through pip's cache, Maven Central
    through Maven's), then a compaction through ``deploy/entrypoint.sh driver`` (a Kubernetes
    driver pod's start) with ``-Xshare:on``: the driver's JVM must map the class-data archive
    the installation made, or it does not start."""
    prefix = tmp_path / "opt" / "kafka-compactor"
    done = subprocess.run([str(DEPLOY / "install.sh"), str(REPO), str(prefix)],
                          capture_output=True, text=True, check=False, timeout=1500,
                          env={k: v for k, v in os.environ.items()
                               if k not in ("VIRTUAL_ENV", "PYTHONPATH", "S3A")})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    _, env = _dockerfile()
    image_env = {k: v.replace(IMAGE_HOME, str(prefix)) for k, v in env.items()}
    for key in ("SPARK_HOME", "PYSPARK_PYTHON"):
        assert Path(image_env[key]).exists(), (key, image_env[key])
    java_options = (prefix / "java-options").read_text().split()
    (archive,) = [o.split("=", 1)[1] for o in java_options
                  if o.startswith("-XX:SharedArchiveFile=")]
    assert Path(archive).is_relative_to(prefix) and Path(archive).exists()
    assert all(Path(j).is_relative_to(prefix)
               for j in (prefix / "classpath").read_text().strip().split(os.pathsep))

    logs = tmp_path / "logs"
    generate(str(logs), GeneratorConfig(topics=("profiles",), partitions=1,
                                        records_per_partition=800, distinct_keys=40, seed=3,
                                        segment_bytes=16 * 1024,
                                        topic_configs={"profiles": {"cleanup.policy":
                                                                    "compact"}}))
    run_env = {**{k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")},
               **image_env, "PATH": f"{image_env['PATH'].split(':')[0]}:{os.environ['PATH']}",
               "SPARK_DRIVER_BIND_ADDRESS": "127.0.0.1", "SPARK_LOCAL_IP": "127.0.0.1",
               "SPARK_SUBMIT_OPTS": "-Xshare:on"}
    entrypoint = str(DEPLOY / "entrypoint.sh")
    proc = subprocess.run(
        [entrypoint, "driver", "--master", "local[1]", str(prefix / "jobs" / "compact.py"),
         str(logs), "--assume-kafka-defaults", "--now-ms", str(DEFAULT_START_MS + 86_400_000),
         "--json"], capture_output=True, text=True, env=run_env, check=False, timeout=600,
        cwd=tmp_path)  # a pod's working directory: not the repository's compactor/
    assert proc.returncode == EXIT_OK, proc.stderr[-3000:]
    report = json.loads(proc.stdout.splitlines()[0])
    assert report["command"] == "compact" and report["status"] == "ok"
    assert {p["topic"]: p["status"] for p in report["partitions"]}["profiles"] == "cleaned"
    version = subprocess.run([entrypoint, "compactor", "--version"], capture_output=True,
                             text=True, env=run_env, check=True, cwd=tmp_path).stdout
    assert _version() in version
    assert sys.executable not in version
