// Consumes one partition from the beginning with Apache Kafka's own Java consumer.
//
//   java -cp 'libs/*:classes' ConsumeRecords --bootstrap-server HOST:PORT --topic T
//        [--partition P] [--max-records N] [--timeout-ms MS] [--offset-for-time MS ...]
//        [--consumer-config key=value ...]
//
// The partition is assigned (no group, no committed offsets) and read from its
// beginning offset until N records came back, or (without --max-records) until the
// position reaches the end offset the broker reported at the start; the consumer
// checks every batch's CRC (check.crcs=true). Exits non-zero if the timeout
// (default 60 s) passes first, after printing what it got.
//
// Prints one JSON line per record, in offset order:
//   {"kind": "record", "offset", "timestamp", "timestampType": "CreateTime"|...,
//    "leaderEpoch": int|null, "key": b64|null, "value": b64|null,
//    "headers": [{"key": str, "value": b64|null}]}
// then one summary line, the broker's ListOffsets answers:
//   {"kind": "offsets", "beginning": n, "end": n,
//    "forTimes": [{"timestamp": MS, "offset": n|null, "foundTimestamp": MS|null}]}
// Bytes are base64 so keys and values can be any bytes.
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public final class ConsumeRecords {
    private static String b64(byte[] data) {
        return data == null ? null : Base64.getEncoder().encodeToString(data);
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = null, topic = null;
        int partition = 0;
        long maxRecords = -1, timeoutMs = 60_000;
        List<Long> forTimes = new ArrayList<>();
        Properties props = new Properties();
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--bootstrap-server" -> bootstrap = args[++i];
                case "--topic" -> topic = args[++i];
                case "--partition" -> partition = Integer.parseInt(args[++i]);
                case "--max-records" -> maxRecords = Long.parseLong(args[++i]);
                case "--timeout-ms" -> timeoutMs = Long.parseLong(args[++i]);
                case "--offset-for-time" -> forTimes.add(Long.parseLong(args[++i]));
                case "--consumer-config" -> {
                    String[] kv = args[++i].split("=", 2);
                    props.put(kv[0], kv[1]);
                }
                default -> throw new IllegalArgumentException("unknown argument " + args[i]);
            }
        }
        if (bootstrap == null || topic == null) {
            throw new IllegalArgumentException("--bootstrap-server and --topic are required");
        }
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.putIfAbsent(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.putIfAbsent(ConsumerConfig.CHECK_CRCS_CONFIG, "true");

        ObjectMapper json = new ObjectMapper();
        TopicPartition tp = new TopicPartition(topic, partition);
        Duration apiTimeout = Duration.ofMillis(timeoutMs);
        long deadline = System.currentTimeMillis() + timeoutMs;
        StringBuilder out = new StringBuilder();
        long count = 0;
        boolean done = false;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            consumer.assign(List.of(tp));
            long beginning = consumer.beginningOffsets(List.of(tp), apiTimeout).get(tp);
            long end = consumer.endOffsets(List.of(tp), apiTimeout).get(tp);
            consumer.seekToBeginning(List.of(tp));
            while (!done && System.currentTimeMillis() < deadline) {
                if (maxRecords < 0 && consumer.position(tp, apiTimeout) >= end) break;
                for (ConsumerRecord<byte[], byte[]> rec : consumer.poll(Duration.ofMillis(200))) {
                    ObjectNode row = json.createObjectNode();
                    row.put("kind", "record");
                    row.put("offset", rec.offset());
                    row.put("timestamp", rec.timestamp());
                    row.put("timestampType", rec.timestampType().name);
                    if (rec.leaderEpoch().isPresent()) row.put("leaderEpoch", rec.leaderEpoch().get());
                    else row.putNull("leaderEpoch");
                    row.put("key", b64(rec.key()));
                    row.put("value", b64(rec.value()));
                    ArrayNode headers = row.putArray("headers");
                    for (Header h : rec.headers()) {
                        headers.addObject().put("key", h.key()).put("value", b64(h.value()));
                    }
                    out.append(json.writeValueAsString(row)).append('\n');
                    if (++count == maxRecords) {
                        done = true;
                        break;
                    }
                }
            }
            if (maxRecords < 0 && consumer.position(tp, apiTimeout) >= end) done = true;

            ObjectNode summary = json.createObjectNode();
            summary.put("kind", "offsets");
            summary.put("beginning", beginning);
            summary.put("end", end);
            ArrayNode times = summary.putArray("forTimes");
            for (long ts : forTimes) {
                Map<TopicPartition, Long> query = new HashMap<>();
                query.put(tp, ts);
                OffsetAndTimestamp found = consumer.offsetsForTimes(query, apiTimeout).get(tp);
                ObjectNode row = times.addObject().put("timestamp", ts);
                if (found == null) {
                    row.putNull("offset");
                    row.putNull("foundTimestamp");
                } else {
                    row.put("offset", found.offset());
                    row.put("foundTimestamp", found.timestamp());
                }
            }
            out.append(json.writeValueAsString(summary)).append('\n');
        }
        System.out.print(out);
        System.out.flush();
        if (!done) {
            System.err.println("timed out after " + timeoutMs + " ms with " + count + " records");
            System.exit(1);
        }
    }
}
