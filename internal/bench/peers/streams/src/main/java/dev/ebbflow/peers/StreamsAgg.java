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
import org.apache.kafka.streams.kstream.KGroupedStream;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.processor.TimestampExtractor;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.QueryableStoreTypes;
import org.apache.kafka.streams.state.ReadOnlyKeyValueStore;
import org.apache.kafka.streams.state.ReadOnlyWindowStore;
import org.apache.kafka.streams.state.WindowStore;

/**
 * The peer benchmark's Kafka Streams 4.4 app: the same aggregation as the
 * ebbflow job (per user: sum, count and max of amount) with exactly_once_v2
 * and a 1 s commit interval. The input's record key is the user, so
 * groupByKey needs no repartition topic. Kafka Streams never ends by itself:
 * the app watches its group's committed offsets and, once they reach the
 * input's end offsets, reads its store and writes the result file
 * (user,sum,count,max per line).
 *
 * <p>With window-ms above 0 (the windowed variant) it aggregates per user and
 * tumbling window of event time, the record's ts (a TimestampExtractor):
 * windowedBy(TimeWindows.ofSizeAndGrace(window, grace)) with grace the
 * input's disorder, so no record is dropped as late. The windowed store is
 * read at the end (lines user@window-start,sum,count,max) and keeps every
 * window of the input (retention 1 day of event time). suppress(untilWindowCloses)
 * cannot serve: it emits a window only when stream time passes its end plus
 * grace, and a bounded input ends without a record past the last windows.
 *
 * <p>Arguments: brokers topic threads result-file state-dir window-ms grace-ms
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
    if (args.length != 7) {
      throw new IllegalArgumentException(
          "usage: StreamsAgg brokers topic threads result-file state-dir window-ms grace-ms");
    }
    String brokers = args[0], topic = args[1], resultFile = args[3], stateDir = args[4];
    int threads = Integer.parseInt(args[2]);
    long windowMs = Long.parseLong(args[5]), graceMs = Long.parseLong(args[6]);
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
    Consumed<String, byte[]> consumed = Consumed.with(Serdes.String(), Serdes.ByteArray());
    if (windowMs > 0) {
      // The event time: the record's ts (Unix ms), parsed once more here as
      // a user's extractor does (the value is parsed again for the amount).
      TimestampExtractor ts =
          (record, partitionTime) -> {
            try {
              return mapper.readTree((byte[]) record.value()).get("ts").asLong();
            } catch (IOException e) {
              throw new UncheckedIOException(e);
            }
          };
      consumed = consumed.withTimestampExtractor(ts);
    }
    KGroupedStream<String, Long> grouped =
        b.stream(topic, consumed)
            .mapValues(
                v -> {
                  try {
                    JsonNode n = mapper.readTree(v);
                    return n.get("amount").asLong();
                  } catch (IOException e) {
                    throw new UncheckedIOException(e);
                  }
                })
            .groupByKey(Grouped.with(Serdes.String(), Serdes.Long()));
    if (windowMs > 0) {
      grouped
          .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofMillis(windowMs), Duration.ofMillis(graceMs)))
          .aggregate(
              () -> Agg.EMPTY,
              (user, amount, agg) -> agg.add(amount),
              Materialized.<String, Agg, WindowStore<Bytes, byte[]>>as("aggs")
                  .withKeySerde(Serdes.String())
                  .withValueSerde(AGG_SERDE)
                  .withRetention(Duration.ofDays(1)));
    } else {
      grouped.aggregate(
          () -> Agg.EMPTY,
          (user, amount, agg) -> agg.add(amount),
          Materialized.<String, Agg, KeyValueStore<Bytes, byte[]>>as("aggs")
              .withKeySerde(Serdes.String())
              .withValueSerde(AGG_SERDE));
    }

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
      try (PrintWriter w = new PrintWriter(Files.newBufferedWriter(Path.of(resultFile)))) {
        if (windowMs > 0) {
          ReadOnlyWindowStore<String, Agg> store =
              streams.store(StoreQueryParameters.fromNameAndType("aggs", QueryableStoreTypes.windowStore()));
          try (KeyValueIterator<Windowed<String>, Agg> it = store.all()) {
            while (it.hasNext()) {
              KeyValue<Windowed<String>, Agg> kv = it.next();
              write(w, kv.key.key() + "@" + kv.key.window().start(), kv.value);
            }
          }
        } else {
          ReadOnlyKeyValueStore<String, Agg> store =
              streams.store(StoreQueryParameters.fromNameAndType("aggs", QueryableStoreTypes.keyValueStore()));
          try (KeyValueIterator<String, Agg> it = store.all()) {
            while (it.hasNext()) {
              KeyValue<String, Agg> kv = it.next();
              write(w, kv.key, kv.value);
            }
          }
        }
      }
      streams.close(Duration.ofSeconds(30));
    }
  }

  /** Writes one result line: key,sum,count,max. */
  static void write(PrintWriter w, String key, Agg a) {
    w.println(key + "," + a.sum + "," + a.count + "," + a.max);
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
