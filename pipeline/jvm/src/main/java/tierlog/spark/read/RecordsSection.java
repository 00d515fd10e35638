package tierlog.spark.read;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import org.apache.kafka.common.compress.Compression;
import org.apache.kafka.common.record.CompressionType;
import org.apache.kafka.common.record.RecordBatch;
import org.apache.kafka.common.utils.BufferSupplier;

/**
 * A v2 batch's records section put on the end of the column batch's {@link ByteArena}:
 * decompressed there, whole, by Kafka's own codec classes, or copied there in one piece when
 * uncompressed. Decompressing once into the arena (instead of Kafka's record-by-record
 * stream, a buffer and a copy per record) is what lets {@link V2Records} walk records, and
 * the key and value columns point at them, at close to the codec's own speed (issue 21).
 */
final class RecordsSection {
    private static final int ATTRIBUTES_OFFSET = 21;
    private static final int CODEC_MASK = 0x07;
    /** Room reserved ahead of each read from a codec's stream. */
    private static final int READ_CHUNK = 1 << 16;

    private final BufferSupplier buffers = BufferSupplier.create();

    /**
     * Append the section of {@code batch}, a v2 batch from its first byte to its last, to
     * {@code arena}; returns where it starts there (it ends at the arena's length). A section
     * that does not decompress throws Kafka's exception or an UncheckedIOException.
     */
    int load(ByteBuffer batch, ByteArena arena) {
        int codecId = batch.getShort(ATTRIBUTES_OFFSET) & CODEC_MASK;
        ByteBuffer section = batch.duplicate().position(BatchHeader.V2_HEADER_SIZE).slice();
        if (codecId == CompressionType.NONE.id) {
            return arena.append(section);
        }
        int start = arena.length();
        Compression codec = Compression.of(CompressionType.forId(codecId)).build();
        try (InputStream stream = codec.wrapForInput(section, RecordBatch.MAGIC_VALUE_V2, buffers)) {
            while (true) {
                arena.reserve(READ_CHUNK);
                byte[] bytes = arena.bytes();
                int read = stream.read(bytes, arena.length(), bytes.length - arena.length());
                if (read <= 0) {
                    return start;
                }
                arena.commit(read);
            }
        } catch (IOException error) {
            throw new UncheckedIOException(error);
        }
    }
}
