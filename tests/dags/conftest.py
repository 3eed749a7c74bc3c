"""Airflow for the DAG tests: a private AIRFLOW_HOME with a sqlite metadata DB, the DAG folder
of this repo, the spark connection from an environment variable, and this venv's spark-submit
on the PATH. Set before Airflow is first imported (Airflow reads its config at import)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_HOME = tempfile.mkdtemp(prefix="airflow-home-")
os.environ.update({
    "AIRFLOW_HOME": _HOME,
    "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "airflow_dags"),
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{_HOME}/airflow.db",
    "AIRFLOW_CONN_SPARK_DEFAULT": '{"conn_type": "spark", "host": "local[2]"}',
    "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    "SPARK_LOCAL_IP": "127.0.0.1",
    "PYSPARK_PYTHON": sys.executable,
})


@pytest.fixture(scope="session")
def airflow_db() -> str:
    """``airflow db migrate`` once per run (dag.test needs the metadata tables)."""
    proc = subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return _HOME
