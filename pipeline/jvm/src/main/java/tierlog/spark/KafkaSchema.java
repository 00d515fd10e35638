package tierlog.spark;

import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * The rows' shape: exactly Spark's Kafka source's schema (tierlog/pipeline/schema.py), so a
 * query moves between the two by changing the format; {@code headers} only with
 * includeHeaders, null for a record without headers.
 */
public final class KafkaSchema {
    public static final String KEY = "key";
    public static final String VALUE = "value";
    public static final String TOPIC = "topic";
    public static final String PARTITION = "partition";
    public static final String OFFSET = "offset";
    public static final String TIMESTAMP = "timestamp";
    public static final String TIMESTAMP_TYPE = "timestampType";
    public static final String HEADERS = "headers";

    public static final ArrayType HEADERS_TYPE =
            DataTypes.createArrayType(
                    new StructType()
                            .add("key", DataTypes.StringType)
                            .add("value", DataTypes.BinaryType));

    private KafkaSchema() {}

    public static StructType of(boolean includeHeaders) {
        StructType schema =
                new StructType(
                        new StructField[] {
                            DataTypes.createStructField(KEY, DataTypes.BinaryType, true),
                            DataTypes.createStructField(VALUE, DataTypes.BinaryType, true),
                            DataTypes.createStructField(TOPIC, DataTypes.StringType, true),
                            DataTypes.createStructField(PARTITION, DataTypes.IntegerType, true),
                            DataTypes.createStructField(OFFSET, DataTypes.LongType, true),
                            DataTypes.createStructField(TIMESTAMP, DataTypes.TimestampType, true),
                            DataTypes.createStructField(TIMESTAMP_TYPE, DataTypes.IntegerType, true),
                        });
        return includeHeaders ? schema.add(HEADERS, HEADERS_TYPE, true) : schema;
    }

    /** Whether the options ask for headers (Spark's option names are case-insensitive). */
    public static boolean includeHeaders(java.util.Map<String, String> options) {
        for (var entry : options.entrySet()) {
            if (entry.getKey().equalsIgnoreCase("includeHeaders")) {
                return entry.getValue().trim().equalsIgnoreCase("true");
            }
        }
        return false;
    }
}
