#!/usr/bin/env bash
# The image's entrypoint (deploy/Dockerfile). Spark on Kubernetes (spark-submit's k8s master,
# the spark-operator) starts its pods with the argument `driver` or `executor` and hands them
# their settings in environment variables (Spark's KubernetesExecutorBackend, the
# BasicExecutorFeatureStep's env); anything else runs as given (`compactor run ...`).
#
# Both JVMs start as the `compactor` command's does: the installation's jars first on the
# classpath (PREFIX/classpath), so that the JVM maps the class-data archive
# `python -m compactor.tools.class_archive` made with that classpath.
set -euo pipefail

prefix=${KAFKA_COMPACTOR_HOME:-/opt/kafka-compactor}
spark_home=${SPARK_HOME:?SPARK_HOME is not set}
classpath="$(cat "$prefix/classpath"):${SPARK_CONF_DIR:-$spark_home/conf}:$spark_home/jars/*"

case "${1:-}" in
    driver)
        shift
        exec "$spark_home/bin/spark-submit" \
            --conf "spark.driver.bindAddress=${SPARK_DRIVER_BIND_ADDRESS:?}" \
            --conf "spark.executorEnv.SPARK_DRIVER_POD_IP=${SPARK_DRIVER_BIND_ADDRESS}" \
            --conf "spark.driver.extraClassPath=$(cat "$prefix/classpath")" \
            --deploy-mode client "$@"
        ;;
    executor)
        shift
        options=()
        for name in "${!SPARK_JAVA_OPT_@}"; do  # spark.executor.extraJavaOptions, split
            options+=("${!name}")
        done
        exec "${JAVA_HOME:+$JAVA_HOME/bin/}java" "${options[@]}" \
            -Xms"${SPARK_EXECUTOR_MEMORY:?}" -Xmx"${SPARK_EXECUTOR_MEMORY}" \
            -cp "$classpath${SPARK_EXTRA_CLASSPATH:+:$SPARK_EXTRA_CLASSPATH}:$PWD" \
            org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
            --driver-url "${SPARK_DRIVER_URL:?}" --executor-id "${SPARK_EXECUTOR_ID:?}" \
            --cores "${SPARK_EXECUTOR_CORES:?}" --app-id "${SPARK_APPLICATION_ID:?}" \
            --hostname "${SPARK_EXECUTOR_POD_IP:?}" \
            --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" \
            --podName "${SPARK_EXECUTOR_POD_NAME:?}"
        ;;
    *)
        exec "$@"
        ;;
esac
