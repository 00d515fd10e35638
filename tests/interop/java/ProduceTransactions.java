// Runs transactions with Apache Kafka's own transactional producers, for the interop tests.
//
//   java -cp 'libs/*:classes' ProduceTransactions --bootstrap-server HOST:PORT --topic T
//        --plan plan.jsonl
//
// Each plan line is one step, run in order:
//   {"producer": name, "action": "begin"}
//   {"producer": name, "action": "send", "key": b64|null, "value": b64|null, "timestamp": ms}
//   {"producer": name, "action": "commit"} / {"producer": name, "action": "abort"}
// Every name is its own producer (transactional.id "interop-<name>"), created and
// initialised on first use, so transactions of several producers interleave in the
// partition. A send is flushed at once: one record, one batch, in plan order.
// Markers are written by the broker's transaction coordinator when a transaction ends.
//
// Prints one JSON line per send, in plan order: {"producer", "offset"}.
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class ProduceTransactions {
    private static byte[] bytes(JsonNode node) {
        return node == null || node.isNull() ? null : Base64.getDecoder().decode(node.asText());
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = null, topic = null, plan = null;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--bootstrap-server" -> bootstrap = args[++i];
                case "--topic" -> topic = args[++i];
                case "--plan" -> plan = args[++i];
                default -> throw new IllegalArgumentException("unknown argument " + args[i]);
            }
        }
        if (bootstrap == null || topic == null || plan == null) {
            throw new IllegalArgumentException("--bootstrap-server, --topic and --plan are required");
        }
        ObjectMapper json = new ObjectMapper();
        Map<String, KafkaProducer<byte[], byte[]>> producers = new LinkedHashMap<>();
        StringBuilder out = new StringBuilder();
        try {
            for (String line : Files.readAllLines(Path.of(plan))) {
                if (line.isBlank()) continue;
                JsonNode step = json.readTree(line);
                String name = step.get("producer").asText();
                KafkaProducer<byte[], byte[]> producer = producers.get(name);
                if (producer == null) {
                    Properties props = new Properties();
                    props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
                    props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "interop-" + name);
                    props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
                    props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
                    producer = new KafkaProducer<>(props);
                    producer.initTransactions();
                    producers.put(name, producer);
                }
                switch (step.get("action").asText()) {
                    case "begin" -> producer.beginTransaction();
                    case "send" -> {
                        JsonNode ts = step.get("timestamp");
                        var sent = producer.send(new ProducerRecord<>(topic, 0,
                                ts == null || ts.isNull() ? null : ts.asLong(),
                                bytes(step.get("key")), bytes(step.get("value"))));
                        producer.flush();
                        RecordMetadata md = sent.get();
                        ObjectNode row = json.createObjectNode();
                        row.put("producer", name);
                        row.put("offset", md.offset());
                        out.append(json.writeValueAsString(row)).append('\n');
                    }
                    case "commit" -> producer.commitTransaction();
                    case "abort" -> producer.abortTransaction();
                    default -> throw new IllegalArgumentException("unknown action in " + line);
                }
            }
            System.out.print(out);
            System.out.flush();
        } finally {
            for (KafkaProducer<byte[], byte[]> producer : producers.values()) producer.close();
        }
    }
}
