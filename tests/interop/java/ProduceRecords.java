// Produces records with Apache Kafka's own Java producer, for the interop tests.
//
//   java -cp 'libs/*:classes' ProduceRecords --bootstrap-server HOST:PORT --topic T
//        --input records.jsonl [--flush-every N] [--producer-config key=value ...]
//
// Each input line is one record:
//   {"key": b64|null, "value": b64|null, "headers": [{"key": str, "value": b64|null}],
//    "timestamp": ms|null, "partition": int|null, "compression": "gzip"|...|null}
// Bytes are base64 so keys and values can be any bytes. "compression" overrides the
// producer's compression.type for that record; records are sent in input order, and
// the producer in use is flushed before switching codec, so a log gets batches in
// several codecs in a known order. --flush-every N flushes after every N records,
// which closes the open batch: with a large enough batch.size, batches are exactly N.
//
// Prints one JSON line per record, in input order: {"partition", "offset", "timestamp"}.
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.Future;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class ProduceRecords {
    private static byte[] bytes(JsonNode node) {
        return node == null || node.isNull() ? null : Base64.getDecoder().decode(node.asText());
    }

    private static Long optLong(JsonNode node) {
        return node == null || node.isNull() ? null : node.asLong();
    }

    private static Integer optInt(JsonNode node) {
        return node == null || node.isNull() ? null : node.asInt();
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = null, topic = null, input = null;
        int flushEvery = 0;
        Properties base = new Properties();
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--bootstrap-server" -> bootstrap = args[++i];
                case "--topic" -> topic = args[++i];
                case "--input" -> input = args[++i];
                case "--flush-every" -> flushEvery = Integer.parseInt(args[++i]);
                case "--producer-config" -> {
                    String[] kv = args[++i].split("=", 2);
                    base.put(kv[0], kv[1]);
                }
                default -> throw new IllegalArgumentException("unknown argument " + args[i]);
            }
        }
        if (bootstrap == null || topic == null || input == null) {
            throw new IllegalArgumentException("--bootstrap-server, --topic and --input are required");
        }
        base.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        base.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        base.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        base.putIfAbsent(ProducerConfig.ACKS_CONFIG, "all");
        base.putIfAbsent(ProducerConfig.LINGER_MS_CONFIG, "100");
        String defaultCodec = base.getProperty(ProducerConfig.COMPRESSION_TYPE_CONFIG, "none");

        ObjectMapper json = new ObjectMapper();
        Map<String, KafkaProducer<byte[], byte[]>> producers = new HashMap<>();
        List<Future<RecordMetadata>> sent = new ArrayList<>();
        KafkaProducer<byte[], byte[]> current = null;
        int sinceFlush = 0;
        try {
            for (String line : Files.readAllLines(Path.of(input))) {
                if (line.isBlank()) continue;
                JsonNode rec = json.readTree(line);
                JsonNode codecNode = rec.get("compression");
                String codec = codecNode == null || codecNode.isNull() ? defaultCodec : codecNode.asText();
                KafkaProducer<byte[], byte[]> producer = producers.computeIfAbsent(codec, c -> {
                    Properties props = (Properties) base.clone();
                    props.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, c);
                    return new KafkaProducer<>(props);
                });
                if (current != null && producer != current) {
                    current.flush();
                    sinceFlush = 0;
                }
                current = producer;
                RecordHeaders headers = new RecordHeaders();
                JsonNode hs = rec.get("headers");
                if (hs != null) {
                    for (JsonNode h : hs) headers.add(h.get("key").asText(), bytes(h.get("value")));
                }
                sent.add(producer.send(new ProducerRecord<>(topic, optInt(rec.get("partition")),
                        optLong(rec.get("timestamp")), bytes(rec.get("key")), bytes(rec.get("value")),
                        headers)));
                if (flushEvery > 0 && ++sinceFlush >= flushEvery) {
                    producer.flush();
                    sinceFlush = 0;
                }
            }
            if (current != null) current.flush();
            StringBuilder out = new StringBuilder();
            for (Future<RecordMetadata> future : sent) {
                RecordMetadata md = future.get();
                ObjectNode row = json.createObjectNode();
                row.put("partition", md.partition());
                row.put("offset", md.offset());
                row.put("timestamp", md.timestamp());
                out.append(json.writeValueAsString(row)).append('\n');
            }
            System.out.print(out);
            System.out.flush();
        } finally {
            for (KafkaProducer<byte[], byte[]> producer : producers.values()) producer.close();
        }
    }
}
