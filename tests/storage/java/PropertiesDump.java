// What Apache Kafka reads from a server.properties file, for tests/storage/test_properties.py.
//
//   java -cp '.cache/tools/kafka-4.1.1/libs/*' tests/storage/java/PropertiesDump.java FILE
//
// loads FILE with Kafka's Utils.loadProps (how kafka-server-start reads its config) and
// prints one line per entry, sorted by key: the key and the value as hex of their UTF-8
// bytes, tab-separated (so that no character of either can blur the output).
import java.nio.charset.StandardCharsets;
import java.util.HexFormat;
import java.util.Properties;
import java.util.TreeSet;

import org.apache.kafka.common.utils.Utils;

public class PropertiesDump {
    public static void main(String[] args) throws Exception {
        Properties properties = Utils.loadProps(args[0]);
        HexFormat hex = HexFormat.of();
        for (String key : new TreeSet<>(properties.stringPropertyNames())) {
            String value = properties.getProperty(key);
            System.out.println(hex.formatHex(key.getBytes(StandardCharsets.UTF_8)) + "\t"
                    + hex.formatHex(value.getBytes(StandardCharsets.UTF_8)));
        }
    }
}
