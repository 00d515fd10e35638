package tierlog.spark.read;

import java.nio.ByteBuffer;
import org.apache.kafka.common.InvalidRecordException;

/**
 * The records of one v2 batch, walked where its {@link RecordsSection} put them in the
 * column batch's {@link ByteArena}: varints read in place, keys, values and headers left
 * where they lie, for {@link RecordColumns} to point at (keys, values) or copy (headers). Kafka's own iterator reads each record through a
 * stream into a buffer of its own, which cost a decode many times the codec's time (issue
 * 21); v0/v1 entries still go through Kafka's classes.
 *
 * <p>Checked as the storage engine's decoder checks a batch (records/rows.py
 * walk_v2_records): every length and varint within its record, each record's fields ending
 * exactly where its length says, as many records as the header declares and no bytes after
 * them. Damage fails with Kafka's {@link InvalidRecordException}. A header key is decoded as
 * Kafka's consumer decodes it (invalid UTF-8 becomes replacement characters).
 */
final class V2Records {
    private static final int FIRST_TIMESTAMP_OFFSET = 27;
    private static final int MAX_TIMESTAMP_OFFSET = 35;
    private static final int ATTRIBUTES_OFFSET = 21;
    private static final int LOG_APPEND_TIME_MASK = 0x08;
    /** A length varint's smallest record: attributes and five one-byte varints. */
    private static final int MIN_RECORD_LENGTH = 6;

    private final RecordsSection section = new RecordsSection();
    private final ByteArena arena;
    private byte[] data;
    private int position;
    private int end;
    private int remaining;
    private long baseOffset;
    private long baseTimestamp;
    private long logAppendTime;
    private boolean isLogAppendTime;

    // The record read by the last next(): positions in data(), -1 lengths for null.
    private long offset;
    private long timestampDelta;
    private int keyStart;
    private int keyLength;
    private int valueStart;
    private int valueLength;
    private int headerCount;
    private int[] headerFields = new int[16]; // per header: key start, key length, value start, value length

    V2Records(ByteArena arena) {
        this.arena = arena;
    }

    /** Start walking {@code batch} (a whole v2 batch) of {@code recordCount} records. */
    void open(ByteBuffer batch, int recordCount) {
        position = section.load(batch, arena);
        data = arena.bytes();
        end = arena.length();
        remaining = recordCount;
        baseOffset = batch.getLong(0);
        baseTimestamp = batch.getLong(FIRST_TIMESTAMP_OFFSET);
        logAppendTime = batch.getLong(MAX_TIMESTAMP_OFFSET);
        isLogAppendTime = (batch.getShort(ATTRIBUTES_OFFSET) & LOG_APPEND_TIME_MASK) != 0;
        if (remaining == 0) {
            checkNothingAfterRecords();
        }
    }

    boolean hasNext() {
        return remaining > 0;
    }

    /** Read the next record (its fields through the getters, until the next call). */
    void next() {
        if (position >= end) {
            throw new InvalidRecordException("batch holds fewer records than it declares");
        }
        int length = readVarint(end);
        int recordEnd = position + length;
        if (length < MIN_RECORD_LENGTH || length > end - position) {
            throw new InvalidRecordException("record length " + length + " is invalid or overruns the batch");
        }
        position++; // attributes: none are defined for records
        timestampDelta = readVarlong(recordEnd);
        int offsetDelta = readVarint(recordEnd);
        keyLength = readVarint(recordEnd);
        keyStart = position;
        position = skipField(keyLength, recordEnd);
        valueLength = readVarint(recordEnd);
        valueStart = position;
        position = skipField(valueLength, recordEnd);
        if (position >= recordEnd) {
            throw new InvalidRecordException("a record's key or value overruns it");
        }
        headerCount = readVarint(recordEnd);
        skipHeaders(recordEnd);
        if (position != recordEnd) {
            throw new InvalidRecordException("record declares " + length + " bytes but its fields end elsewhere");
        }
        offset = baseOffset + offsetDelta;
        if (--remaining == 0) {
            checkNothingAfterRecords();
        }
    }

    /**
     * Empty the arena for a new column batch, all but the current batch's records not yet
     * read: they move to its start, to be walked on from there.
     */
    void keepOnlyUnreadInArena() {
        if (!hasNext()) {
            arena.keepFrom(arena.length());
            return;
        }
        arena.keepFrom(position);
        data = arena.bytes();
        end -= position;
        position = 0;
    }

    private void checkNothingAfterRecords() {
        if (position != end) {
            throw new InvalidRecordException("batch holds bytes beyond its declared records");
        }
    }

    /** The position after a field of {@code length} bytes (none when negative: null). */
    private int skipField(int length, int recordEnd) {
        if (length < 0) {
            return position;
        }
        if (length > recordEnd - position) {
            throw new InvalidRecordException("a " + length + "-byte field overruns its record");
        }
        return position + length;
    }

    private void skipHeaders(int recordEnd) {
        if (headerCount < 0 || headerCount > recordEnd - position) {
            throw new InvalidRecordException("invalid header count " + headerCount);
        }
        if (headerFields.length < 4 * headerCount) {
            headerFields = new int[4 * headerCount];
        }
        for (int i = 0; i < 4 * headerCount; i += 4) {
            int keySize = readVarint(recordEnd);
            if (keySize < 0) {
                throw new InvalidRecordException("a record header has a null key");
            }
            headerFields[i] = position;
            headerFields[i + 1] = keySize;
            position = skipField(keySize, recordEnd);
            int valueSize = readVarint(recordEnd);
            headerFields[i + 2] = position;
            headerFields[i + 3] = valueSize;
            position = skipField(valueSize, recordEnd);
        }
    }

    /** A zigzag varint of at most 5 bytes at the position, all before {@code limit}. */
    private int readVarint(int limit) {
        int raw = 0;
        for (int shift = 0; shift < 35; shift += 7) {
            if (position >= limit) {
                throw new InvalidRecordException("varint overruns its record");
            }
            byte b = data[position++];
            raw |= (b & 0x7F) << shift;
            if (b >= 0) {
                return (raw >>> 1) ^ -(raw & 1);
            }
        }
        throw new InvalidRecordException("varint longer than 5 bytes");
    }

    /** A zigzag varlong of at most 10 bytes at the position, all before {@code limit}. */
    private long readVarlong(int limit) {
        long raw = 0;
        for (int shift = 0; shift < 70; shift += 7) {
            if (position >= limit) {
                throw new InvalidRecordException("varlong overruns its record");
            }
            byte b = data[position++];
            raw |= (long) (b & 0x7F) << shift;
            if (b >= 0) {
                return (raw >>> 1) ^ -(raw & 1);
            }
        }
        throw new InvalidRecordException("varlong longer than 10 bytes");
    }

    /** The bytes the current record's key, value and headers lie in (the arena's). */
    byte[] data() {
        return data;
    }

    long offset() {
        return offset;
    }

    /**
     * The record's timestamp in ms. A sum past a long's range is damage, but only for a
     * record that is read: reckoned here, not in {@link #next}, which walks all of them.
     */
    long timestamp() {
        return isLogAppendTime ? logAppendTime : Math.addExact(baseTimestamp, timestampDelta);
    }

    int keyStart() {
        return keyStart;
    }

    /** -1 for a null key. */
    int keyLength() {
        return keyLength;
    }

    int valueStart() {
        return valueStart;
    }

    /** -1 for a null value. */
    int valueLength() {
        return valueLength;
    }

    int headerCount() {
        return headerCount;
    }

    /** Where header {@code index}'s key starts in data(). */
    int headerKeyStart(int index) {
        return headerFields[4 * index];
    }

    int headerKeyLength(int index) {
        return headerFields[4 * index + 1];
    }

    int headerValueStart(int index) {
        return headerFields[4 * index + 2];
    }

    /** -1 for a null value. */
    int headerValueLength(int index) {
        return headerFields[4 * index + 3];
    }
}
