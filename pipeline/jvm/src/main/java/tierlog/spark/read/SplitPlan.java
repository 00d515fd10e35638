package tierlog.spark.read;

import com.fasterxml.jackson.databind.JsonNode;
import tierlog.spark.io.FileSource;
import tierlog.spark.io.S3Connection;
import tierlog.spark.io.S3Source;
import tierlog.spark.io.SegmentSource;

/** The Python planner's splits (split_json.py) as Spark's input partitions. */
public final class SplitPlan {
    private SplitPlan() {}

    /** {@code plan}: {@code {"batch_rows": n, "splits": [...]}}. */
    public static InputSplit[] parse(JsonNode plan) {
        int batchRows = plan.get("batch_rows").asInt();
        JsonNode splits = plan.get("splits");
        InputSplit[] result = new InputSplit[splits.size()];
        for (int i = 0; i < result.length; i++) {
            result[i] = split(splits.get(i), batchRows);
        }
        return result;
    }

    static InputSplit split(JsonNode split, int batchRows) {
        JsonNode aborted = split.get("aborted");
        long[][] ranges = new long[aborted.size()][];
        for (int i = 0; i < ranges.length; i++) {
            JsonNode txn = aborted.get(i);
            ranges[i] = new long[] {txn.get(0).asLong(), txn.get(1).asLong(), txn.get(2).asLong()};
        }
        return new InputSplit(
                split.get("topic").asText(),
                split.get("partition").asInt(),
                source(split.get("source")),
                split.get("start_position").asLong(),
                split.get("end_position").asLong(),
                split.get("start_offset").asLong(),
                split.get("end_offset").asLong(),
                new AbortedTransactions(ranges),
                batchRows);
    }

    /** Where the split's bytes are: split_json.py's {@code "source"}. */
    static SegmentSource source(JsonNode source) {
        String kind = source.get("kind").asText();
        String name = source.get("name").asText();
        long base = source.get("base").asLong();
        if (kind.equals("file")) {
            return new FileSource(source.get("path").asText(), base, name);
        }
        if (kind.equals("s3")) {
            return new S3Source(
                    connection(source.get("connection")),
                    source.get("bucket").asText(),
                    source.get("key").asText(),
                    base,
                    name);
        }
        throw new IllegalArgumentException("unknown segment source kind " + kind + " for " + name);
    }

    /** s3_connection.py's JSON: what the driver resolved (endpoint, region, credentials...). */
    static S3Connection connection(JsonNode json) {
        return new S3Connection(
                textOrNull(json.get("endpoint")),
                json.get("region").asText(),
                json.get("access_key_id").asText(),
                json.get("secret_access_key").asText(),
                textOrNull(json.get("session_token")),
                json.get("path_style").asBoolean(),
                json.get("connect_timeout_ms").asInt(),
                json.get("read_timeout_ms").asInt(),
                json.get("max_attempts").asInt());
    }

    private static String textOrNull(JsonNode value) {
        return value == null || value.isNull() ? null : value.asText();
    }
}
