package tierlog.spark.read;

import java.nio.ByteBuffer;

/**
 * What an entry's header bytes say, for any magic, checked as the storage engine checks them
 * (records/batch.py parse_header): a magic of 0, 1 or 2, enough bytes for its header, a
 * length no smaller than its minimum, a codec id Kafka knows. Anything else is corrupt.
 */
public record BatchHeader(
        long position,
        int size,
        byte magic,
        long baseOffset,
        long lastOffset,
        int recordCount,
        int timestampTypeId,
        boolean isTransactional,
        boolean isControl,
        long producerId) {
    static final int LOG_OVERHEAD = 12;
    static final int MAGIC_OFFSET = 16;
    static final int MIN_HEADER_SIZE = MAGIC_OFFSET + 1;
    static final int V2_HEADER_SIZE = 61;
    /** Enough bytes for the header of any magic. */
    static final int HEADER_READ_SIZE = V2_HEADER_SIZE;

    private static final int CODEC_MASK = 0x07;
    private static final int MAX_CODEC_ID = 4;
    private static final int TIMESTAMP_TYPE_MASK = 0x08;
    private static final int TRANSACTIONAL_MASK = 0x10;
    private static final int CONTROL_MASK = 0x20;

    /** Whether a v0/v1 entry is a compressed wrapper (its record count is unknown: -1). */
    boolean isLegacyWrapper() {
        return recordCount < 0 && magic < 2;
    }

    /**
     * The header at {@code offset} of {@code buffer} ({@code available} bytes from there),
     * which sits at {@code position} of {@code segment}.
     */
    static BatchHeader parse(ByteBuffer buffer, int offset, int available, long position, String segment) {
        if (available < MIN_HEADER_SIZE) {
            throw corrupt(segment, position, "only " + available + " bytes, a header needs more");
        }
        byte magic = buffer.get(offset + MAGIC_OFFSET);
        if (magic == 2) {
            return parseV2(buffer, offset, available, position, segment);
        }
        if (magic == 0 || magic == 1) {
            return parseLegacy(buffer, offset, available, position, segment, magic);
        }
        throw corrupt(segment, position, "unknown magic " + magic);
    }

    private static BatchHeader parseV2(ByteBuffer buffer, int offset, int available, long position, String segment) {
        if (available < V2_HEADER_SIZE) {
            throw corrupt(segment, position, "v2 header truncated to " + available + " bytes");
        }
        long baseOffset = buffer.getLong(offset);
        int size = buffer.getInt(offset + 8) + LOG_OVERHEAD;
        if (size < V2_HEADER_SIZE) {
            throw corrupt(segment, position, "batch declares " + size + " bytes, below the v2 header");
        }
        short attributes = buffer.getShort(offset + 21);
        checkCodec(attributes, position, segment);
        int lastOffsetDelta = buffer.getInt(offset + 23);
        return new BatchHeader(
                position,
                size,
                (byte) 2,
                baseOffset,
                baseOffset + lastOffsetDelta,
                buffer.getInt(offset + 57),
                (attributes & TIMESTAMP_TYPE_MASK) != 0 ? 1 : 0,
                (attributes & TRANSACTIONAL_MASK) != 0,
                (attributes & CONTROL_MASK) != 0,
                buffer.getLong(offset + 43));
    }

    private static BatchHeader parseLegacy(
            ByteBuffer buffer, int offset, int available, long position, String segment, byte magic) {
        int needed = magic == 0 ? 18 : 26;
        if (available < needed) {
            throw corrupt(segment, position, "v" + magic + " header truncated to " + available + " bytes");
        }
        long entryOffset = buffer.getLong(offset);
        int messageSize = buffer.getInt(offset + 8);
        if (messageSize < (magic == 0 ? 14 : 22)) {
            throw corrupt(segment, position, "v" + magic + " message declares only " + messageSize + " bytes");
        }
        byte attributes = buffer.get(offset + MAGIC_OFFSET + 1);
        checkCodec(attributes, position, segment);
        boolean wrapper = (attributes & CODEC_MASK) != 0;
        int timestampType = magic == 0 ? -1 : (attributes & TIMESTAMP_TYPE_MASK) != 0 ? 1 : 0;
        return new BatchHeader(
                position,
                messageSize + LOG_OVERHEAD,
                magic,
                entryOffset,
                entryOffset,
                wrapper ? -1 : 1,
                timestampType,
                false,
                false,
                -1L);
    }

    private static void checkCodec(int attributes, long position, String segment) {
        if ((attributes & CODEC_MASK) > MAX_CODEC_ID) {
            throw corrupt(segment, position, "unknown compression codec id " + (attributes & CODEC_MASK));
        }
    }

    static CorruptSegmentException corrupt(String segment, long position, String reason) {
        return new CorruptSegmentException(segment, position, reason, null);
    }
}
