#!/bin/sh
# Kafka's own Java assignors on the cases of bench.assignors, each in a fresh JVM (JDK 17).
#
#   bench/kafka_java/run.sh KAFKA_CHECKOUT [CASE...]      (default: every case)
#
# KAFKA_CHECKOUT is a source tree of apache/kafka (the figures in bench/assignors.py come from commit
# 1eb7644349cb07139d6a3c1ad1986979647cac99). Only its client assignors and the plain classes they
# use are compiled; the stubs beside this script (Utils, MessageUtil, the record types,
# ConsumerGroupMetadata) stand in for the few classes that would pull in Kafka's network layer or its
# generated protocol messages (none is on the assignors' path), and Logger/LoggerFactory for slf4j.
set -eu
[ $# -ge 1 ] || { sed -n '2,10p' "$0"; exit 2; }
KAFKA=$(cd "$1" && pwd)
shift
SRC="$KAFKA/clients/src/main/java"
[ -d "$SRC/org/apache/kafka/clients/consumer" ] || { echo "no Kafka client sources under $SRC" >&2; exit 2; }
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=$(mktemp -d)
trap 'rm -rf "$BUILD"' EXIT
# The stubs and the driver are named on the command line, so they win over Kafka's classes of the same
# name; everything else comes from Kafka's sources.
javac -nowarn -d "$BUILD" -sourcepath "$SRC" "$HERE"/*.java
CASES=${*:-"range-uniform roundrobin-uniform sticky-uniform sticky-uniform-owned coop-uniform coop-uniform-owned
sticky-nonequal sticky-nonequal-owned coop-nonequal coop-nonequal-owned sticky-halves sticky-halves-owned
coop-halves coop-halves-owned"}
for case in $CASES; do
    java -cp "$BUILD" org.apache.kafka.clients.consumer.AssignorBench "$case"
done
