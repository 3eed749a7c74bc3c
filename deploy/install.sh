#!/usr/bin/env bash
# Install kafka-compactor where its jobs run: the container image's one build step
# (deploy/Dockerfile) and a machine's install without the repository's Makefile.
#
#   deploy/install.sh SOURCE PREFIX
#
# SOURCE is the repository (a checkout or its archive), PREFIX the installation
# (/opt/kafka-compactor in the image). PREFIX gets:
#   venv/       Python 3.11 with the package and the pinned dependencies (deploy/constraints.txt),
#               delta-spark's jars (and S3A's with S3A=1) in venv/share/kafka-compactor, fetched
#               by Maven from compactor/spark/pom.xml, the writer's compiled kernels and the
#               driver JVM's class-data archive of Spark's classes
#   jobs/       spark-submit's entry scripts (jobs/*.py)
#   classpath, java-options
#               the jars a JVM of this installation puts first on its classpath, and its
#               options (the class-data archive, which serves only that classpath; errors-only
#               logging): deploy/entrypoint.sh starts the drivers and executors with them
#
# Needs python3.11 (PYTHON), Java 17 and mvn, and the package registries (PyPI, Maven Central).
set -euo pipefail

if [ $# -ne 2 ]; then
    echo "usage: $0 SOURCE PREFIX" >&2
    exit 2
fi
source_dir=$(cd "$1" && pwd)
mkdir -p "$2"
prefix=$(cd "$2" && pwd)
python=${PYTHON:-python3.11}

step() { printf 'install: %s\n' "$*"; }

step "Python environment in $prefix/venv ($("$python" --version))"
"$python" -m venv "$prefix/venv"
bin=$prefix/venv/bin
"$bin/pip" install --quiet --upgrade pip
"$bin/pip" install --quiet -c "$source_dir/deploy/constraints.txt" "$source_dir"

# from here the installed package only: `python -m` puts the working directory first on the path
cd "$prefix"
step "jars from Maven Central (compactor/spark/pom.xml)"
"$bin/python" -m compactor.tools.build.jars ${S3A:+--s3a}

step "the writer's kernels"
"$bin/python" -c "from compactor.native import compile_kernels; compile_kernels()"

step "the class-data archive of Spark's classes"
# a JVM of this installation starts without it, slower, when it cannot be made
SPARK_LOCAL_IP=127.0.0.1 "$bin/python" -m compactor.tools.build.class_archive \
    || step "no class-data archive: jobs start without it"

step "jobs, classpath and java-options"
mkdir -p "$prefix/jobs"
cp "$source_dir"/jobs/*.py "$prefix/jobs/"
"$bin/python" -c "from compactor.spark import delta; \
print(delta.classpath_conf(local=True)['spark.driver.extraClassPath'])" > "$prefix/classpath"
"$bin/python" -c "from compactor.spark import session; \
print(session.driver_java_options(None))" > "$prefix/java-options"
step "done: $bin/compactor, $prefix/jobs"
