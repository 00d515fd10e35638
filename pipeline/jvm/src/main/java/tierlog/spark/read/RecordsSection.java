package tierlog.spark.read;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.util.Arrays;
import org.apache.kafka.common.compress.Compression;
import org.apache.kafka.common.record.CompressionType;
import org.apache.kafka.common.record.RecordBatch;
import org.apache.kafka.common.utils.BufferSupplier;

/**
 * A v2 batch's records section as one run of bytes in an array: the batch's own bytes when
 * it is uncompressed and on the heap, else the section decompressed, whole, by Kafka's own
 * codec classes into an array reused from batch to batch. Decompressing once into one array
 * (instead of Kafka's record-by-record stream, a buffer and a copy per record) is what lets
 * {@link V2Records} walk records at close to the codec's own speed (issue 21).
 */
final class RecordsSection {
    private static final int ATTRIBUTES_OFFSET = 21;
    private static final int CODEC_MASK = 0x07;

    private final BufferSupplier buffers = BufferSupplier.create();
    private byte[] decompressed = new byte[1 << 16];
    private byte[] array;
    private int start;
    private int end;

    /** The bytes holding the section (valid until the next {@link #load}). */
    byte[] array() {
        return array;
    }

    int start() {
        return start;
    }

    int end() {
        return end;
    }

    /**
     * Load the section of {@code batch}, a v2 batch from its first byte to its last. A
     * section that does not decompress throws Kafka's exception or an UncheckedIOException.
     */
    void load(ByteBuffer batch) {
        int codecId = batch.getShort(ATTRIBUTES_OFFSET) & CODEC_MASK;
        ByteBuffer section = batch.duplicate().position(BatchHeader.V2_HEADER_SIZE).slice();
        if (codecId == CompressionType.NONE.id && section.hasArray()) {
            array = section.array();
            start = section.arrayOffset();
            end = start + section.remaining();
            return;
        }
        if (codecId == CompressionType.NONE.id) {
            ensureCapacity(section.remaining());
            section.get(decompressed, 0, section.remaining());
            setDecompressed(section.limit());
            return;
        }
        Compression codec = Compression.of(CompressionType.forId(codecId)).build();
        try (InputStream stream = codec.wrapForInput(section, RecordBatch.MAGIC_VALUE_V2, buffers)) {
            int length = 0;
            int read;
            while ((read = stream.read(decompressed, length, decompressed.length - length)) > 0) {
                length += read;
                ensureCapacity(length + 1);
            }
            setDecompressed(length);
        } catch (IOException error) {
            throw new UncheckedIOException(error);
        }
    }

    private void setDecompressed(int length) {
        array = decompressed;
        start = 0;
        end = length;
    }

    private void ensureCapacity(int length) {
        if (length > decompressed.length) {
            decompressed = Arrays.copyOf(decompressed, Math.max(length, decompressed.length * 2));
        }
    }
}
