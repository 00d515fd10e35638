// Creates a topic with explicit configs through Apache Kafka's Admin client.
//
//   java -cp 'libs/*:classes' CreateTopic --bootstrap-server HOST:PORT --topic T
//        [--partitions N] [--config key=value ...]
//
// Replication factor is 1 (the interop broker is a single node). Exits non-zero with
// Kafka's error (e.g. InvalidConfigurationException) if the broker refuses the topic.
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;

public final class CreateTopic {
    public static void main(String[] args) throws Exception {
        String bootstrap = null, topic = null;
        int partitions = 1;
        Map<String, String> configs = new HashMap<>();
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--bootstrap-server" -> bootstrap = args[++i];
                case "--topic" -> topic = args[++i];
                case "--partitions" -> partitions = Integer.parseInt(args[++i]);
                case "--config" -> {
                    String[] kv = args[++i].split("=", 2);
                    configs.put(kv[0], kv[1]);
                }
                default -> throw new IllegalArgumentException("unknown argument " + args[i]);
            }
        }
        if (bootstrap == null || topic == null) {
            throw new IllegalArgumentException("--bootstrap-server and --topic are required");
        }
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(props)) {
            NewTopic newTopic = new NewTopic(topic, partitions, (short) 1).configs(configs);
            admin.createTopics(List.of(newTopic)).all().get();
        }
    }
}
