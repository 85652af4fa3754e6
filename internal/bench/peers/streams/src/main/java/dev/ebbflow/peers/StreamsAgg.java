package dev.ebbflow.peers;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.PrintWriter;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Map;
import java.util.Properties;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StoreQueryParameters;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.QueryableStoreTypes;
import org.apache.kafka.streams.state.ReadOnlyKeyValueStore;

/**
 * The peer benchmark's Kafka Streams 4.4 app: the same aggregation as the
 * ebbflow job (per user: sum, count and max of amount) with exactly_once_v2
 * and a 1 s commit interval. The input's record key is the user, so
 * groupByKey needs no repartition topic. Kafka Streams never ends by itself:
 * the app watches its group's committed offsets and, once they reach the
 * input's end offsets, reads its store and writes the result file
 * (user,sum,count,max per line).
 *
 * <p>Arguments: brokers topic threads result-file state-dir
 */
public final class StreamsAgg {
  /** sum, count, max of one user. */
  record Agg(long sum, long count, long max) {
    static final Agg EMPTY = new Agg(0, 0, Long.MIN_VALUE);

    Agg add(long amount) {
      return new Agg(sum + amount, count + 1, Math.max(max, amount));
    }
  }

  static final Serde<Agg> AGG_SERDE =
      Serdes.serdeFrom(
          (topic, a) -> ByteBuffer.allocate(24).putLong(a.sum).putLong(a.count).putLong(a.max).array(),
          (topic, b) -> {
            ByteBuffer buf = ByteBuffer.wrap(b);
            return new Agg(buf.getLong(), buf.getLong(), buf.getLong());
          });

  public static void main(String[] args) throws Exception {
    if (args.length != 5) {
      throw new IllegalArgumentException("usage: StreamsAgg brokers topic threads result-file state-dir");
    }
    String brokers = args[0], topic = args[1], resultFile = args[3], stateDir = args[4];
    int threads = Integer.parseInt(args[2]);
    String app = "peers-streams-" + System.nanoTime();

    Properties p = new Properties();
    p.put(StreamsConfig.APPLICATION_ID_CONFIG, app);
    p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
    p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
    p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 1000);
    p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, threads);
    p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
    p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
    p.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");

    ObjectMapper mapper = new ObjectMapper();
    StreamsBuilder b = new StreamsBuilder();
    b.stream(topic, Consumed.with(Serdes.String(), Serdes.ByteArray()))
        .mapValues(
            v -> {
              try {
                JsonNode n = mapper.readTree(v);
                return n.get("amount").asLong();
              } catch (IOException e) {
                throw new UncheckedIOException(e);
              }
            })
        .groupByKey(Grouped.with(Serdes.String(), Serdes.Long()))
        .aggregate(
            () -> Agg.EMPTY,
            (user, amount, agg) -> agg.add(amount),
            Materialized.<String, Agg, KeyValueStore<Bytes, byte[]>>as("aggs")
                .withKeySerde(Serdes.String())
                .withValueSerde(AGG_SERDE));

    try (KafkaStreams streams = new KafkaStreams(b.build(), p);
        Admin admin = Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, brokers))) {
      streams.start();
      Map<TopicPartition, Long> ends = endOffsets(admin, topic);
      while (!caughtUp(admin, app, ends)) {
        if (streams.state() == KafkaStreams.State.ERROR) {
          throw new IllegalStateException("kafka streams failed");
        }
        Thread.sleep(100);
      }
      ReadOnlyKeyValueStore<String, Agg> store =
          streams.store(StoreQueryParameters.fromNameAndType("aggs", QueryableStoreTypes.keyValueStore()));
      try (PrintWriter w = new PrintWriter(Files.newBufferedWriter(Path.of(resultFile)));
          KeyValueIterator<String, Agg> it = store.all()) {
        while (it.hasNext()) {
          KeyValue<String, Agg> kv = it.next();
          w.println(kv.key + "," + kv.value.sum + "," + kv.value.count + "," + kv.value.max);
        }
      }
      streams.close(Duration.ofSeconds(30));
    }
  }

  static Map<TopicPartition, Long> endOffsets(Admin admin, String topic) throws Exception {
    int partitions =
        admin.describeTopics(java.util.List.of(topic)).allTopicNames().get().get(topic).partitions().size();
    Map<TopicPartition, OffsetSpec> req =
        java.util.stream.IntStream.range(0, partitions)
            .boxed()
            .collect(Collectors.toMap(i -> new TopicPartition(topic, i), i -> OffsetSpec.latest()));
    return admin.listOffsets(req).all().get().entrySet().stream()
        .collect(Collectors.toMap(Map.Entry::getKey, e -> e.getValue().offset()));
  }

  /** Whether the group committed every partition up to its end offset. */
  static boolean caughtUp(Admin admin, String group, Map<TopicPartition, Long> ends) throws Exception {
    Map<TopicPartition, OffsetAndMetadata> committed =
        admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
    for (Map.Entry<TopicPartition, Long> e : ends.entrySet()) {
      OffsetAndMetadata c = committed.get(e.getKey());
      if (e.getValue() > 0 && (c == null || c.offset() < e.getValue())) {
        return false;
      }
    }
    return true;
  }

  private StreamsAgg() {}
}
