package tierlog.spark.read;

import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import java.io.IOException;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.sql.catalyst.InternalRow;
import tierlog.spark.KafkaSchema;
import tierlog.spark.Planners;

/**
 * The decoder as tests drive it over py4j (tests/pipeline/jvm): one split read exactly as a
 * Spark task reads it, its rows handed back as JSON, so the storage engine's Python decoder
 * can be held equal to it on generated logs. (tests/benchmarks/java/DecodeBench.java times
 * the same reader on one thread.)
 */
public final class SplitRows {
    private SplitRows() {}

    /**
     * {@code planJson} (split_json.py's plan of one split) decoded: one JSON array per row,
     * {@code [offset, timestamp_us, timestampType, key, value, headers]}, bytes as arrays of
     * numbers, headers as {@code [[key, value], ...]} or null.
     */
    public static String decode(String planJson) throws IOException {
        InputSplit split = SplitPlan.parse(Planners.JSON.readTree(planJson))[0];
        ArrayNode rows = JsonNodeFactory.instance.arrayNode();
        try (ColumnarSplitReader reader = new ColumnarSplitReader(split, KafkaSchema.of(true))) {
            while (reader.next()) {
                ColumnarBatch batch = reader.get();
                for (int row = 0; row < batch.numRows(); row++) {
                    rows.add(row(batch, row));
                }
            }
        }
        return Planners.toJson(rows);
    }

    private static ArrayNode row(ColumnarBatch batch, int row) {
        ArrayNode result = JsonNodeFactory.instance.arrayNode();
        result.add(batch.column(4).getLong(row));
        result.add(batch.column(5).getLong(row));
        result.add(batch.column(6).getInt(row));
        result.add(bytes(batch.column(0), row));
        result.add(bytes(batch.column(1), row));
        ColumnVector headers = batch.column(7);
        if (headers.isNullAt(row)) {
            result.addNull();
            return result;
        }
        ArrayNode entries = result.addArray();
        ColumnarArray array = headers.getArray(row);
        for (int at = 0; at < array.numElements(); at++) {
            InternalRow entry = array.getStruct(at, 2);
            ArrayNode pair = entries.addArray();
            pair.add(entry.getUTF8String(0).toString());
            if (entry.isNullAt(1)) {
                pair.addNull();
            } else {
                pair.add(numbers(entry.getBinary(1)));
            }
        }
        return result;
    }

    private static ArrayNode bytes(ColumnVector column, int row) {
        return column.isNullAt(row) ? null : numbers(column.getBinary(row));
    }

    private static ArrayNode numbers(byte[] data) {
        ArrayNode result = JsonNodeFactory.instance.arrayNode(data.length);
        for (byte b : data) {
            result.add(b & 0xFF);
        }
        return result;
    }
}
