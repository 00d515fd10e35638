// A KIP-848 group member (group.protocol=consumer) for groups_bench.py: Kafka's side of
// the group figures, printing one JSON line per event with the wall-clock ms it happened.
//
//   java -cp 'libs/*:CLASSES' GroupMember commit BOOTSTRAP GROUP TOPIC WARMUP COUNT [key=value ...]
//     joins GROUP on TOPIC (one partition), then commitSync()s offsets 1, 2, ... WARMUP+COUNT
//     times, one at a time; prints {"event":"commits","latencies_ms":[...]} of the last COUNT.
//   java -cp 'libs/*:CLASSES' GroupMember member BOOTSTRAP GROUP TOPIC DONE_FILE GO_FILE [key=value ...]
//     joins a group of its own first (GROUP-warmup, until assigned: a warm client), prints
//     "ready", waits for GO_FILE, then joins GROUP: polls every 50 ms until DONE_FILE
//     exists, then closes (leaves the group); prints
//     "subscribed" (before subscribe()), "assigned"/"revoked"/"lost" (in the callbacks, with
//     the partitions and what it owns after), "consumed" (the first record of a partition
//     since it was assigned) and "closed".
// The key=value pairs are consumer configs (group.protocol=consumer is always set).
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.stream.Collectors;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public final class GroupMember {
    private static final Duration POLL = Duration.ofMillis(50);

    private static synchronized void emit(String event, String fields) {
        System.out.println(
                "{\"event\":\"" + event + "\",\"ms\":" + System.currentTimeMillis() + fields + "}");
        System.out.flush();
    }

    private static String partitions(Collection<Integer> partitions) {
        return partitions.stream().sorted().map(String::valueOf).collect(Collectors.joining(",", "[", "]"));
    }

    private static KafkaConsumer<byte[], byte[]> consumer(String bootstrap, String group, String[] args, int from) {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("group.id", group);
        props.put("group.protocol", "consumer");
        props.put("enable.auto.commit", "false");
        props.put("auto.offset.reset", "earliest");
        for (int i = from; i < args.length; i++) {
            String[] kv = args[i].split("=", 2);
            props.put(kv[0], kv[1]);
        }
        return new KafkaConsumer<>(props, new ByteArrayDeserializer(), new ByteArrayDeserializer());
    }

    public static void main(String[] args) throws Exception {
        String mode = args[0], bootstrap = args[1], group = args[2], topic = args[3];
        switch (mode) {
            case "commit" -> commit(bootstrap, group, topic, Integer.parseInt(args[4]), Integer.parseInt(args[5]), args);
            case "member" -> member(bootstrap, group, topic, Path.of(args[4]), Path.of(args[5]), args);
            default -> throw new IllegalArgumentException("unknown mode " + mode);
        }
    }

    private static void commit(String bootstrap, String group, String topic, int warmup, int count, String[] args) {
        TopicPartition tp = new TopicPartition(topic, 0);
        try (KafkaConsumer<byte[], byte[]> consumer = consumer(bootstrap, group, args, 6)) {
            consumer.subscribe(List.of(topic));
            while (!consumer.assignment().contains(tp)) {
                consumer.poll(POLL);
            }
            List<Double> latencies = new ArrayList<>();
            for (int i = 1; i <= warmup + count; i++) {
                long start = System.nanoTime();
                consumer.commitSync(Map.of(tp, new OffsetAndMetadata(i)));
                long took = System.nanoTime() - start;
                if (i > warmup) {
                    latencies.add(took / 1e6);
                }
            }
            OffsetAndMetadata committed = consumer.committed(Set.of(tp)).get(tp);
            if (committed == null || committed.offset() != warmup + count) {  // stored, not just answered
                throw new IllegalStateException("committed " + committed + ", expected " + (warmup + count));
            }
            emit("commits", ",\"latencies_ms\":" + latencies);
        }
    }

    // A member of a group of its own first, until it owns a partition: the measured join
    // is then a running application's, not a cold JVM's first network and group calls.
    private static void warmUp(String bootstrap, String group, String topic, String[] args) {
        try (KafkaConsumer<byte[], byte[]> consumer = consumer(bootstrap, group, args, 6)) {
            consumer.subscribe(List.of(topic));
            while (consumer.assignment().isEmpty()) {
                consumer.poll(POLL);
            }
        }
    }

    private static void member(
            String bootstrap, String group, String topic, Path done, Path go, String[] args)
            throws InterruptedException {
        warmUp(bootstrap, group + "-warmup", topic, args);
        emit("ready", "");
        while (!Files.exists(go)) {  // the bench picks the moment to join
            Thread.sleep(1);
        }
        TreeSet<Integer> owned = new TreeSet<>();
        TreeSet<Integer> consumed = new TreeSet<>();  // read since assigned
        try (KafkaConsumer<byte[], byte[]> consumer = consumer(bootstrap, group, args, 6)) {
            ConsumerRebalanceListener listener = new ConsumerRebalanceListener() {
                private void changed(String event, Collection<TopicPartition> tps, boolean added) {
                    List<Integer> ps = tps.stream().map(TopicPartition::partition).toList();
                    if (added) {
                        owned.addAll(ps);
                    } else {
                        owned.removeAll(ps);
                        consumed.removeAll(ps);
                    }
                    emit(event, ",\"partitions\":" + partitions(ps) + ",\"owned\":" + partitions(owned));
                }

                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> tps) {
                    changed("assigned", tps, true);
                }

                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> tps) {
                    changed("revoked", tps, false);
                }

                @Override
                public void onPartitionsLost(Collection<TopicPartition> tps) {
                    changed("lost", tps, false);
                }
            };
            emit("subscribed", "");
            consumer.subscribe(List.of(topic), listener);
            while (!Files.exists(done)) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(POLL);
                for (ConsumerRecord<byte[], byte[]> record : records) {
                    if (consumed.add(record.partition())) {
                        emit("consumed", ",\"partition\":" + record.partition());
                    }
                }
            }
        }
        emit("closed", "");
    }
}
