#!/usr/bin/env bash
# A real Apache Kafka broker (KRaft, one combined controller+broker) on
# loopback, for CI and benchmarks. Its jars come from Maven Central through
# Maven and are cached in .kafka/libs (and ~/.m2); its data, log and pid file
# live in .kafka/ too. Every start formats fresh storage: the broker's data is
# disposable.
#
#   .ci/kafka.sh start     fetch the jars if needed, start, wait until it answers
#   .ci/kafka.sh stop      SIGTERM, wait, SIGKILL after a timeout
#   .ci/kafka.sh status    exit 0 if running
#   .ci/kafka.sh brokers   print the bootstrap address
set -euo pipefail
cd "$(dirname "$0")/.."

KAFKA_VERSION=4.4.0
SLF4J_VERSION=2.0.17
LOG4J_VERSION=2.25.5 # the log4j-core that kafka_2.13 brings in; its slf4j binding must match
PORT=19092
CONTROLLER_PORT=19093
START_TIMEOUT=90 # seconds to wait for the broker to answer
STOP_TIMEOUT=30  # seconds to wait after SIGTERM before SIGKILL

HOME_DIR=$PWD/.kafka
LIBS=$HOME_DIR/libs
DATA=$HOME_DIR/data
PID_FILE=$HOME_DIR/kafka.pid
LOG_FILE=$HOME_DIR/kafka.log
BROKERS=127.0.0.1:$PORT
# What the cached jars were fetched for: a change here fetches them again.
LIBS_STAMP="kafka_2.13:$KAFKA_VERSION slf4j-api:$SLF4J_VERSION log4j-slf4j2-impl:$LOG4J_VERSION"

# pid prints the broker's pid if it is running.
pid() {
  [ -f "$PID_FILE" ] || return 1
  local p
  p=$(cat "$PID_FILE")
  # The pid must still be our broker, not a process that reused the number.
  tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline" | grep -q "kafka.Kafka $HOME_DIR/server.properties" || return 1
  echo "$p"
}

# tools installs Java and Maven from Debian's packages when they are missing
# (the machine image normally has them).
tools() {
  command -v java >/dev/null && command -v mvn >/dev/null && return
  echo "kafka.sh: installing Java and Maven"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq default-jre-headless maven >/dev/null
}

# fetch copies kafka_2.13 and its runtime dependencies into $LIBS, unless the
# cached jars are for the same versions.
fetch() {
  if [ "$(cat "$LIBS/.stamp" 2>/dev/null)" = "$LIBS_STAMP" ]; then
    return
  fi
  echo "kafka.sh: fetching Apache Kafka $KAFKA_VERSION jars with Maven"
  mkdir -p "$HOME_DIR"
  cat >"$HOME_DIR/pom.xml" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>ebbflow.ci</groupId>
  <artifactId>kafka-broker</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>$KAFKA_VERSION</version>
    </dependency>
    <!-- kafka-clients asks for slf4j 1.7; the broker logs through log4j 2 via slf4j 2. -->
    <dependency>
      <groupId>org.slf4j</groupId>
      <artifactId>slf4j-api</artifactId>
      <version>$SLF4J_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j2-impl</artifactId>
      <version>$LOG4J_VERSION</version>
    </dependency>
  </dependencies>
</project>
EOF
  rm -rf "$LIBS.tmp"
  if ! mvn -B -q -f "$HOME_DIR/pom.xml" dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$LIBS.tmp" >"$HOME_DIR/mvn.log" 2>&1; then
    echo "kafka.sh: maven failed to fetch the Kafka jars:" >&2
    tail -n 40 "$HOME_DIR/mvn.log" >&2
    exit 1
  fi
  echo "$LIBS_STAMP" >"$LIBS.tmp/.stamp"
  rm -rf "$LIBS"
  mv "$LIBS.tmp" "$LIBS"
}

configure() {
  cat >"$HOME_DIR/server.properties" <<EOF
# One combined KRaft controller and broker on loopback, written by .ci/kafka.sh.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$DATA
num.partitions=1
auto.create.topics.enable=true
default.replication.factor=1
min.insync.replicas=1
# Internal topics: one replica, and one partition each so that the first
# group or transaction does not wait for 50 partitions to be created.
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
share.coordinator.state.topic.num.partitions=1
group.initial.rebalance.delay.ms=0
EOF
  cat >"$HOME_DIR/log4j2.properties" <<EOF
rootLogger.level = INFO
rootLogger.appenderRef.stdout.ref = STDOUT
appender.stdout.type = Console
appender.stdout.name = STDOUT
appender.stdout.layout.type = PatternLayout
appender.stdout.layout.pattern = [%d] %p %m (%c)%n
EOF
}

# The JVM command line for the Kafka classes; a prefix of every java run.
JAVA=(java -Xms256m -Xmx1g -XX:+UseG1GC -Djava.awt.headless=true
  "-Dlog4j2.configurationFile=$HOME_DIR/log4j2.properties" -cp "$LIBS/*")

fail_start() {
  echo "kafka.sh: $1; last lines of $LOG_FILE:" >&2
  tail -n 40 "$LOG_FILE" >&2 || true
  stop >&2
  exit 1
}

start() {
  if p=$(pid); then
    echo "kafka.sh: already running (pid $p) on $BROKERS"
    return
  fi
  local port
  for port in "$PORT" "$CONTROLLER_PORT"; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "kafka.sh: port $port is taken by another process; is another broker running?" >&2
      exit 1
    fi
  done
  tools
  fetch
  configure
  go build -o "$HOME_DIR/kafkaping" ./internal/kafkatest/cmd/kafkaping

  rm -rf "$DATA"
  : >"$LOG_FILE"
  # A KRaft cluster id is 16 random bytes in URL-safe base64 without padding;
  # like Kafka's own generator, never one starting with "-" (read as a flag).
  local cluster_id=-
  while [ "${cluster_id:0:1}" = - ]; do
    cluster_id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')
  done
  if ! "${JAVA[@]}" kafka.tools.StorageTool format -t "$cluster_id" -c "$HOME_DIR/server.properties" >>"$LOG_FILE" 2>&1; then
    fail_start "formatting KRaft storage failed"
  fi

  nohup "${JAVA[@]}" kafka.Kafka "$HOME_DIR/server.properties" >>"$LOG_FILE" 2>&1 </dev/null &
  local broker=$!
  echo "$broker" >"$PID_FILE"
  local deadline=$((SECONDS + START_TIMEOUT))
  until kill -0 "$broker" 2>/dev/null && "$HOME_DIR/kafkaping" -brokers "$BROKERS" -timeout 2s 2>/dev/null; do
    kill -0 "$broker" 2>/dev/null || fail_start "the broker exited"
    [ "$SECONDS" -lt "$deadline" ] || fail_start "the broker did not answer within ${START_TIMEOUT}s"
  done
  echo "kafka.sh: Apache Kafka $KAFKA_VERSION running (pid $(cat "$PID_FILE")) on $BROKERS"
}

stop() {
  local p
  if ! p=$(pid); then
    rm -f "$PID_FILE"
    echo "kafka.sh: not running"
    return
  fi
  kill -TERM "$p"
  local deadline=$((SECONDS + STOP_TIMEOUT))
  while pid >/dev/null; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "kafka.sh: broker $p ignored SIGTERM for ${STOP_TIMEOUT}s: killing it" >&2
      kill -KILL "$p" 2>/dev/null || true
      deadline=$((SECONDS + STOP_TIMEOUT))
    fi
    sleep 0.2
  done
  rm -f "$PID_FILE"
  echo "kafka.sh: stopped"
}

case "${1:-}" in
start) start ;;
stop) stop ;;
status)
  if p=$(pid); then echo "running (pid $p) on $BROKERS"; else echo "not running"; exit 1; fi
  ;;
brokers) echo "$BROKERS" ;;
*)
  echo "usage: $0 start|stop|status|brokers" >&2
  exit 2
  ;;
esac
