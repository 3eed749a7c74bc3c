#!/usr/bin/env bash
# The image's entrypoint (deploy/Dockerfile). Spark on Kubernetes (spark-submit's k8s master,
# the spark-operator) starts its pods with the argument `driver` or `executor` and hands them
# their settings in environment variables (KubernetesClientApplication's driver pod,
# BasicExecutorFeatureStep's executor env); anything else runs as given (`compactor run ...`).
#
# Both JVMs start as the `compactor` command's session does (issue 53): the installation's jars
# first on the classpath and its java options (PREFIX/classpath, PREFIX/java-options, written by
# deploy/install.sh: the class-data archive maps only with that classpath), and the Python
# workers are the package's daemon (compactor/spark/daemon.py), which every pod of the image has.
set -euo pipefail

prefix=${KAFKA_COMPACTOR_HOME:-/opt/kafka-compactor}
spark_home=${SPARK_HOME:?SPARK_HOME is not set}
jars=$(cat "$prefix/classpath")
read -r -a java_options < "$prefix/java-options"

case "${1:-}" in
    driver)
        shift
        # SPARK_SUBMIT_OPTS: the client-mode driver JVM's own options, beside any
        # spark.driver.extraJavaOptions of the application
        export SPARK_SUBMIT_OPTS="${java_options[*]} ${SPARK_SUBMIT_OPTS:-}"
        exec "$spark_home/bin/spark-submit" \
            --conf "spark.driver.bindAddress=${SPARK_DRIVER_BIND_ADDRESS:?}" \
            --conf "spark.executorEnv.SPARK_DRIVER_POD_IP=${SPARK_DRIVER_BIND_ADDRESS}" \
            --conf "spark.driver.extraClassPath=$jars" \
            --conf spark.python.daemon.module=compactor.spark.daemon \
            --conf spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled=false \
            --deploy-mode client "$@"
        ;;
    executor)
        shift
        for name in "${!SPARK_JAVA_OPT_@}"; do  # spark.executor.extraJavaOptions, split
            java_options+=("${!name}")
        done
        classpath="$jars:${SPARK_CONF_DIR:-$spark_home/conf}:$spark_home/jars/*"
        exec "${JAVA_HOME:+$JAVA_HOME/bin/}java" "${java_options[@]}" \
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
