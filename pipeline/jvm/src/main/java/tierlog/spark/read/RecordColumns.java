package tierlog.spark.read;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.record.Record;
import org.apache.spark.sql.execution.vectorized.ConstantColumnVector;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.unsafe.types.UTF8String;
import tierlog.spark.KafkaSchema;

/**
 * One split's records as Spark column vectors, only the columns the query needs: a pruned
 * column is never copied out of its batch. Topic and partition are constants of the split;
 * timestamps go from Kafka's milliseconds to Spark's microseconds. The vectors are reused from
 * batch to batch.
 */
final class RecordColumns implements AutoCloseable {
    private enum Kind { KEY, VALUE, TOPIC, PARTITION, OFFSET, TIMESTAMP, TIMESTAMP_TYPE, HEADERS }

    private final Kind[] kinds;
    private final ColumnVector[] vectors;
    private final ColumnarBatch batch;
    private final boolean needsPayload;
    private int rows;

    RecordColumns(StructType required, String topic, int partition, int capacity) {
        StructField[] fields = required.fields();
        kinds = new Kind[fields.length];
        vectors = new ColumnVector[fields.length];
        boolean payload = false;
        for (int i = 0; i < fields.length; i++) {
            kinds[i] = kindOf(fields[i].name());
            payload |= kinds[i] == Kind.KEY || kinds[i] == Kind.VALUE || kinds[i] == Kind.HEADERS;
            vectors[i] = vectorFor(kinds[i], fields[i], topic, partition, capacity);
        }
        needsPayload = payload;
        batch = new ColumnarBatch(vectors);
    }

    /** Whether keys, values or headers are read (else records may be decoded without them). */
    boolean needsPayload() {
        return needsPayload;
    }

    int rows() {
        return rows;
    }

    private static Kind kindOf(String name) {
        return switch (name) {
            case KafkaSchema.KEY -> Kind.KEY;
            case KafkaSchema.VALUE -> Kind.VALUE;
            case KafkaSchema.TOPIC -> Kind.TOPIC;
            case KafkaSchema.PARTITION -> Kind.PARTITION;
            case KafkaSchema.OFFSET -> Kind.OFFSET;
            case KafkaSchema.TIMESTAMP -> Kind.TIMESTAMP;
            case KafkaSchema.TIMESTAMP_TYPE -> Kind.TIMESTAMP_TYPE;
            case KafkaSchema.HEADERS -> Kind.HEADERS;
            default -> throw new IllegalArgumentException("tierlog has no column " + name);
        };
    }

    private static ColumnVector vectorFor(Kind kind, StructField field, String topic, int partition, int capacity) {
        if (kind == Kind.TOPIC) {
            ConstantColumnVector constant = new ConstantColumnVector(capacity, field.dataType());
            constant.setUtf8String(UTF8String.fromString(topic));
            return constant;
        }
        if (kind == Kind.PARTITION) {
            ConstantColumnVector constant = new ConstantColumnVector(capacity, field.dataType());
            constant.setInt(partition);
            return constant;
        }
        return new OnHeapColumnVector(capacity, field.dataType());
    }

    /** Append one record, whose batch has Kafka's timestamp type id {@code timestampTypeId}. */
    void append(Record record, int timestampTypeId) {
        for (int i = 0; i < kinds.length; i++) {
            switch (kinds[i]) {
                case KEY -> appendBytes(writable(i), record.hasKey() ? record.key() : null);
                case VALUE -> appendBytes(writable(i), record.hasValue() ? record.value() : null);
                case OFFSET -> writable(i).appendLong(record.offset());
                case TIMESTAMP -> writable(i).appendLong(micros(record.timestamp()));
                case TIMESTAMP_TYPE -> writable(i).appendInt(timestampTypeId);
                case HEADERS -> appendHeaders(writable(i), record.headers());
                case TOPIC, PARTITION -> { }
            }
        }
        rows++;
    }

    /** Spark's microseconds; a timestamp they cannot hold is damage, not a date to wrap. */
    private static long micros(long timestampMs) {
        if (timestampMs > Long.MAX_VALUE / 1000 || timestampMs < Long.MIN_VALUE / 1000) {
            throw new ArithmeticException("timestamp " + timestampMs + " ms is beyond Spark's timestamps");
        }
        return timestampMs * 1000;
    }

    private WritableColumnVector writable(int column) {
        return (WritableColumnVector) vectors[column];
    }

    private static void appendBytes(WritableColumnVector vector, ByteBuffer bytes) {
        if (bytes == null) {
            vector.appendNull();
        } else if (bytes.hasArray()) {
            vector.appendByteArray(bytes.array(), bytes.arrayOffset() + bytes.position(), bytes.remaining());
        } else {
            byte[] copy = new byte[bytes.remaining()];
            bytes.duplicate().get(copy);
            vector.appendByteArray(copy, 0, copy.length);
        }
    }

    private static void appendBytes(WritableColumnVector vector, byte[] bytes) {
        if (bytes == null) {
            vector.appendNull();
        } else {
            vector.appendByteArray(bytes, 0, bytes.length);
        }
    }

    /** Kafka's source gives null, not an empty list, for a record without headers. */
    private static void appendHeaders(WritableColumnVector vector, Header[] headers) {
        if (headers.length == 0) {
            vector.appendNull();
            return;
        }
        vector.appendArray(headers.length);
        WritableColumnVector entries = vector.arrayData();
        for (Header header : headers) {
            entries.appendStruct(false);
            appendBytes(entries.getChild(0), header.key().getBytes(StandardCharsets.UTF_8));
            appendBytes(entries.getChild(1), header.value());
        }
    }

    /** The rows appended since the last {@link #reset} as one batch. */
    ColumnarBatch batch() {
        batch.setNumRows(rows);
        return batch;
    }

    /** Empty the vectors for the next batch (their memory is kept). */
    void reset() {
        for (ColumnVector vector : vectors) {
            if (vector instanceof WritableColumnVector writable) {
                writable.reset();
            }
        }
        rows = 0;
    }

    @Override
    public void close() {
        batch.close();
    }
}
