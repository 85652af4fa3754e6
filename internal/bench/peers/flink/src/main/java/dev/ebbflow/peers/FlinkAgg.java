package dev.ebbflow.peers;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.AggregateFunction;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.serialization.DeserializationSchema;
import org.apache.flink.api.common.serialization.SerializationSchema;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.connector.sink2.Sink;
import org.apache.flink.api.connector.sink2.SinkWriter;
import org.apache.flink.api.connector.sink2.WriterInitContext;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.StateBackendOptions;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.apache.flink.connector.kafka.sink.KafkaRecordSerializationSchema;
import org.apache.flink.connector.kafka.sink.KafkaSink;
import org.apache.flink.connector.kafka.source.KafkaSource;
import org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer;
import org.apache.flink.core.execution.CheckpointingMode;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.streaming.api.functions.windowing.ProcessWindowFunction;
import org.apache.flink.streaming.api.windowing.assigners.TumblingEventTimeWindows;
import org.apache.flink.streaming.api.windowing.windows.TimeWindow;
import org.apache.flink.util.Collector;

/**
 * The peer benchmark's Flink 2.2 job: the same aggregation as the ebbflow job
 * (per user: sum, count and max of amount), read from a preloaded topic by a
 * bounded KafkaSource, exactly-once checkpoints every second, on a local
 * MiniCluster. Every update goes to the sink, as every update goes into
 * ebbflow's table: "discard" keeps only the latest update per user in memory
 * (to verify the result), "kafka" writes every update with an EXACTLY_ONCE
 * KafkaSink. The result (user,sum,count,max per line) is written to the
 * output file when the job has finished.
 *
 * <p>With window-ms above 0 (the windowed variant) it aggregates per user and
 * tumbling event-time window of the record's ts: watermarks bounded
 * disorder-ms out of order, keyBy user, TumblingEventTimeWindows and an
 * AggregateFunction; each window's aggregate goes to the sink once, when the
 * watermark passes its end (the bounded source's end of input fires the
 * last ones), keyed user@window-start.
 *
 * <p>Arguments: brokers topic parallelism hashmap|rocksdb discard|kafka out-topic result-file
 * checkpoint-dir window-ms disorder-ms
 */
public final class FlinkAgg {
  /** A parsed input record; a Flink POJO. */
  public static final class Event {
    public String user;
    public long amount;
    public long ts;
  }

  /** The aggregate of one user (or one user's window); a Flink POJO. */
  public static final class Agg {
    /** The result's key: the user, or user@window-start (Unix ms). */
    public String key;

    public long sum;
    public long count;
    public long max = Long.MIN_VALUE;
  }

  /** Parses the JSON value of a record, like a user's DeserializationSchema. */
  static final class EventSchema implements DeserializationSchema<Event> {
    private transient ObjectMapper mapper;

    @Override
    public Event deserialize(byte[] message) throws IOException {
      if (mapper == null) {
        mapper = new ObjectMapper();
      }
      JsonNode n = mapper.readTree(message);
      Event e = new Event();
      e.user = n.get("user").asText();
      e.amount = n.get("amount").asLong();
      e.ts = n.get("ts").asLong();
      return e;
    }

    @Override
    public boolean isEndOfStream(Event next) {
      return false;
    }

    @Override
    public TypeInformation<Event> getProducedType() {
      return TypeInformation.of(Event.class);
    }
  }

  /** Keeps the aggregate in keyed state and emits it after each record. */
  static final class Aggregate extends KeyedProcessFunction<String, Event, Agg> {
    private transient ValueState<Agg> state;

    @Override
    public void open(OpenContext ctx) {
      state = getRuntimeContext().getState(new ValueStateDescriptor<>("agg", Agg.class));
    }

    @Override
    public void processElement(Event e, Context ctx, Collector<Agg> out) throws IOException {
      Agg a = state.value();
      if (a == null) {
        a = new Agg();
        a.key = e.user;
      }
      WindowAggregate.fold(a, e);
      state.update(a);
      out.collect(a);
    }
  }

  /** Folds a window's records into its aggregate (the key is set when it fires). */
  static final class WindowAggregate implements AggregateFunction<Event, Agg, Agg> {
    static void fold(Agg a, Event e) {
      a.sum += e.amount;
      a.count++;
      a.max = Math.max(a.max, e.amount);
    }

    @Override
    public Agg createAccumulator() {
      return new Agg();
    }

    @Override
    public Agg add(Event e, Agg a) {
      fold(a, e);
      return a;
    }

    @Override
    public Agg getResult(Agg a) {
      return a;
    }

    @Override
    public Agg merge(Agg a, Agg b) {
      a.sum += b.sum;
      a.count += b.count;
      a.max = Math.max(a.max, b.max);
      return a;
    }
  }

  /** Names a fired window's aggregate user@window-start. */
  static final class WindowKey extends ProcessWindowFunction<Agg, Agg, String, TimeWindow> {
    @Override
    public void process(String user, Context ctx, Iterable<Agg> aggs, Collector<Agg> out) {
      for (Agg a : aggs) {
        a.key = user + "@" + ctx.window().getStart();
        out.collect(a);
      }
    }
  }

  /** The record key of an update: the user. */
  static final class UserKey implements SerializationSchema<Agg> {
    @Override
    public byte[] serialize(Agg a) {
      return a.key.getBytes(StandardCharsets.UTF_8);
    }
  }

  /** The record value of an update: sum,count,max. */
  static final class AggValue implements SerializationSchema<Agg> {
    @Override
    public byte[] serialize(Agg a) {
      return (a.sum + "," + a.count + "," + a.max).getBytes(StandardCharsets.UTF_8);
    }
  }

  /** The latest update per key, kept for the result file. */
  static final Map<String, Agg> LATEST = new ConcurrentHashMap<>();

  /** A sink that keeps the latest update per key and nothing else. */
  static final class LatestSink implements Sink<Agg> {
    @Override
    public SinkWriter<Agg> createWriter(WriterInitContext context) {
      return new SinkWriter<>() {
        @Override
        public void write(Agg a, Context c) {
          LATEST.put(a.key, a);
        }

        @Override
        public void flush(boolean endOfInput) {}

        @Override
        public void close() {}
      };
    }
  }

  public static void main(String[] args) throws Exception {
    if (args.length != 10) {
      throw new IllegalArgumentException(
          "usage: FlinkAgg brokers topic parallelism hashmap|rocksdb discard|kafka out-topic result-file"
              + " checkpoint-dir window-ms disorder-ms");
    }
    String brokers = args[0], topic = args[1];
    int parallelism = Integer.parseInt(args[2]);
    String backend = args[3], sink = args[4], outTopic = args[5], resultFile = args[6], checkpointDir = args[7];
    long windowMs = Long.parseLong(args[8]), disorderMs = Long.parseLong(args[9]);

    Configuration conf = new Configuration();
    conf.set(StateBackendOptions.STATE_BACKEND, backend);
    conf.set(CheckpointingOptions.CHECKPOINTS_DIRECTORY, Path.of(checkpointDir).toUri().toString());
    StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
    env.setParallelism(parallelism);
    env.enableCheckpointing(1000, CheckpointingMode.EXACTLY_ONCE);

    KafkaSource<Event> source =
        KafkaSource.<Event>builder()
            .setBootstrapServers(brokers)
            .setTopics(topic)
            .setGroupId("peers-flink-" + System.nanoTime())
            .setStartingOffsets(OffsetsInitializer.earliest())
            .setBounded(OffsetsInitializer.latest())
            .setValueOnlyDeserializer(new EventSchema())
            .build();
    DataStream<Agg> aggs;
    if (windowMs > 0) {
      aggs =
          env.fromSource(
                  source,
                  WatermarkStrategy.<Event>forBoundedOutOfOrderness(Duration.ofMillis(disorderMs))
                      .withTimestampAssigner((e, t) -> e.ts),
                  "kafka")
              .keyBy(e -> e.user)
              .window(TumblingEventTimeWindows.of(Duration.ofMillis(windowMs)))
              .aggregate(new WindowAggregate(), new WindowKey())
              .name("window");
    } else {
      aggs =
          env.fromSource(source, WatermarkStrategy.noWatermarks(), "kafka")
              .keyBy(e -> e.user)
              .process(new Aggregate())
              .name("aggregate");
    }

    if (sink.equals("kafka")) {
      Properties props = new Properties();
      props.setProperty("transaction.timeout.ms", "60000");
      aggs.sinkTo(
          KafkaSink.<Agg>builder()
              .setBootstrapServers(brokers)
              .setKafkaProducerConfig(props)
              .setRecordSerializer(
                  KafkaRecordSerializationSchema.<Agg>builder()
                      .setTopic(outTopic)
                      .setKeySerializationSchema(new UserKey())
                      .setValueSerializationSchema(new AggValue())
                      .build())
              .setDeliveryGuarantee(DeliveryGuarantee.EXACTLY_ONCE)
              .setTransactionalIdPrefix("peers-flink-" + System.nanoTime())
              .build());
    } else {
      aggs.sinkTo(new LatestSink());
    }
    env.execute("peers-flink-" + backend + "-" + sink);

    if (!sink.equals("kafka")) {
      try (PrintWriter w = new PrintWriter(Files.newBufferedWriter(Path.of(resultFile)))) {
        for (Agg a : LATEST.values()) {
          w.println(a.key + "," + a.sum + "," + a.count + "," + a.max);
        }
      }
    }
  }

  private FlinkAgg() {}
}
