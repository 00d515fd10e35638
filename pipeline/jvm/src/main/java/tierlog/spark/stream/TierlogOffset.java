package tierlog.spark.stream;

import org.apache.spark.sql.connector.read.streaming.Offset;

/**
 * A stream's position: {@code {"topic": {"partition": next offset}}}, the Kafka source's shape,
 * as the Python planner writes it (sorted keys, so equal positions have equal JSON, which is
 * how Spark compares offsets).
 */
final class TierlogOffset extends Offset {
    private final String json;

    TierlogOffset(String json) {
        this.json = json;
    }

    @Override
    public String json() {
        return json;
    }
}
