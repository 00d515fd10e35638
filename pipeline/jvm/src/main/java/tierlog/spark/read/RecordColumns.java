package tierlog.spark.read;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
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
 * column is never copied out of its batch. Keys and values are positions into the column
 * batch's {@link ByteArena} ({@link ArenaBinaryVector}), where their records were
 * decompressed: no record's key or value is copied on its own. Topic and partition are
 * constants of the split; timestamps go from Kafka's milliseconds to Spark's microseconds.
 * The vectors are reused from batch to batch.
 */
final class RecordColumns implements AutoCloseable {
    private enum Kind { KEY, VALUE, TOPIC, PARTITION, OFFSET, TIMESTAMP, TIMESTAMP_TYPE, HEADERS }

    private final ColumnVector[] vectors;
    private final ColumnarBatch batch;
    private final ByteArena arena;
    // The vectors rows are appended to, each null when the query does not read it: one
    // field per column, not a loop over kinds, as append runs once per record.
    private final ArenaBinaryVector key;
    private final ArenaBinaryVector value;
    private final WritableColumnVector offset;
    private final WritableColumnVector timestamp;
    private final WritableColumnVector timestampType;
    private final WritableColumnVector headers;
    private int rows;

    /** Columns whose keys and values lie in {@code arena}, at most {@code capacity} rows a batch. */
    RecordColumns(StructType required, String topic, int partition, int capacity, ByteArena arena) {
        this.arena = arena;
        StructField[] fields = required.fields();
        vectors = new ColumnVector[fields.length];
        Kind[] kinds = new Kind[fields.length];
        for (int i = 0; i < fields.length; i++) {
            kinds[i] = kindOf(fields[i].name());
            vectors[i] = vectorFor(kinds[i], fields[i], topic, partition, capacity, arena);
        }
        batch = new ColumnarBatch(vectors);
        key = (ArenaBinaryVector) vectorOf(kinds, Kind.KEY);
        value = (ArenaBinaryVector) vectorOf(kinds, Kind.VALUE);
        offset = (WritableColumnVector) vectorOf(kinds, Kind.OFFSET);
        timestamp = (WritableColumnVector) vectorOf(kinds, Kind.TIMESTAMP);
        timestampType = (WritableColumnVector) vectorOf(kinds, Kind.TIMESTAMP_TYPE);
        headers = (WritableColumnVector) vectorOf(kinds, Kind.HEADERS);
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

    private static ColumnVector vectorFor(
            Kind kind, StructField field, String topic, int partition, int capacity, ByteArena arena) {
        if (kind == Kind.KEY || kind == Kind.VALUE) {
            return new ArenaBinaryVector(field.dataType(), arena, capacity);
        }
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

    /** The vector of the column of {@code kind}, or null when the query does not read it. */
    private ColumnVector vectorOf(Kind[] kinds, Kind kind) {
        for (int i = 0; i < kinds.length; i++) {
            if (kinds[i] == kind) {
                return vectors[i];
            }
        }
        return null;
    }

    /** Append the record {@code records} has just read, of a batch with {@code timestampTypeId}. */
    void append(V2Records records, int timestampTypeId) {
        if (key != null) {
            key.append(records.keyStart(), records.keyLength());
        }
        if (value != null) {
            value.append(records.valueStart(), records.valueLength());
        }
        if (offset != null) {
            offset.appendLong(records.offset());
        }
        if (timestamp != null) {
            timestamp.appendLong(micros(records.timestamp()));
        }
        if (timestampType != null) {
            timestampType.appendInt(timestampTypeId);
        }
        if (headers != null) {
            appendHeaders(headers, records);
        }
        rows++;
    }

    /** Append one v0/v1 record (Kafka's), of an entry with {@code timestampTypeId}. */
    void append(Record record, int timestampTypeId) {
        if (key != null) {
            appendToArena(key, record.hasKey() ? record.key() : null);
        }
        if (value != null) {
            appendToArena(value, record.hasValue() ? record.value() : null);
        }
        if (offset != null) {
            offset.appendLong(record.offset());
        }
        if (timestamp != null) {
            timestamp.appendLong(micros(record.timestamp()));
        }
        if (timestampType != null) {
            timestampType.appendInt(timestampTypeId);
        }
        if (headers != null) {
            headers.appendNull(); // v0/v1 messages have none
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

    /** A v0/v1 record's key or value, copied onto the arena (it lies in no section there). */
    private void appendToArena(ArenaBinaryVector vector, ByteBuffer bytes) {
        if (bytes == null) {
            vector.append(0, -1);
        } else {
            int length = bytes.remaining();
            vector.append(arena.append(bytes), length);
        }
    }

    /** {@code length} bytes of {@code data} from {@code start}; null when negative. */
    private static void appendBytes(WritableColumnVector vector, byte[] data, int start, int length) {
        if (length < 0) {
            vector.appendNull();
        } else {
            vector.appendByteArray(data, start, length);
        }
    }

    /**
     * The current record's headers from where {@code records} found them; null, not an
     * empty list, for a record without headers, as Kafka's source gives.
     */
    private static void appendHeaders(WritableColumnVector vector, V2Records records) {
        int count = records.headerCount();
        if (count == 0) {
            vector.appendNull();
            return;
        }
        vector.appendArray(count);
        WritableColumnVector entries = vector.arrayData();
        byte[] data = records.data();
        for (int i = 0; i < count; i++) {
            entries.appendStruct(false);
            // Kafka's consumer reads a key as UTF-8 leniently: invalid bytes become U+FFFD.
            byte[] key = new String(data, records.headerKeyStart(i), records.headerKeyLength(i), StandardCharsets.UTF_8)
                    .getBytes(StandardCharsets.UTF_8);
            entries.getChild(0).appendByteArray(key, 0, key.length);
            appendBytes(entries.getChild(1), data, records.headerValueStart(i), records.headerValueLength(i));
        }
    }

    /** The rows appended since the last {@link #reset} as one batch. */
    ColumnarBatch batch() {
        batch.setNumRows(rows);
        return batch;
    }

    /**
     * Empty the vectors for the next batch (their memory is kept); the arena is emptied by
     * its owner, which knows what of it is still to be read.
     */
    void reset() {
        for (ColumnVector vector : vectors) {
            if (vector instanceof WritableColumnVector writable) {
                writable.reset();
            } else if (vector instanceof ArenaBinaryVector binary) {
                binary.reset();
            }
        }
        rows = 0;
    }

    @Override
    public void close() {
        batch.close();
    }
}
