package tierlog.spark.read;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.BufferUnderflowException;
import java.nio.ByteBuffer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.record.MemoryRecords;
import org.apache.kafka.common.record.Record;
import org.apache.kafka.common.record.RecordBatch;
import org.apache.kafka.common.utils.BufferSupplier;
import org.apache.kafka.common.utils.CloseableIterator;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import tierlog.spark.io.SegmentBytes;

/**
 * One split's selected records as column batches: v2 batches walked in place by
 * {@link V2Records} (decompressed once by Kafka's codec classes), v0/v1 entries decoded by
 * Kafka's own record classes; by the rules the planner's splits are made for (the same as
 * tests/pipeline/read_all.py's, over the storage engine's row decoder): read_committed, so
 * control batches and the batches of the split's aborted transactions are skipped; only
 * offsets in {@code [startOffset, endOffset)} are kept; reading stops at the first batch past
 * the end. v0/v1 messages are checked against their CRC, as the storage engine reads them; v2
 * batches are not (the broker checked them when they were appended). Bytes that do not
 * decode fail the task with a {@link CorruptSegmentException} naming the segment and the
 * batch's position.
 */
final class ColumnarSplitReader implements PartitionReader<ColumnarBatch> {
    private final InputSplit split;
    /** The current column batch's keys and values (and the v2 sections they lie in). */
    private final ByteArena arena = new ByteArena();
    private final RecordColumns columns;
    private final BufferSupplier buffers = BufferSupplier.create();
    private final V2Records v2Records = new V2Records(arena);
    private SegmentBytes bytes;
    private BatchWalker walker;
    /** The current v0/v1 entry's records (null while a v2 batch is read, or none). */
    private CloseableIterator<Record> legacyRecords;
    private BatchHeader current;
    private boolean batchOpen;
    private boolean done;

    ColumnarSplitReader(InputSplit split, StructType required) {
        this.split = split;
        this.columns = new RecordColumns(required, split.topic(), split.partition(), split.batchRows(), arena);
    }

    @Override
    public boolean next() throws IOException {
        // Spark has consumed the last batch (PartitionReader's contract): its bytes may go.
        columns.reset();
        v2Records.keepOnlyUnreadInArena();
        while (columns.rows() < split.batchRows() && !done) {
            if (!batchOpen && !nextBatch()) {
                done = true;
                break;
            }
            drain();
        }
        return columns.rows() > 0;
    }

    @Override
    public ColumnarBatch get() {
        return columns.batch();
    }

    /** Open the records of the next batch with selected records; false at the end. */
    private boolean nextBatch() throws IOException {
        if (walker == null) {
            bytes = split.source().open();
            walker = new BatchWalker(bytes, split.source().name(), split.startPosition(), split.endPosition());
        }
        BatchWalker.Found found;
        while ((found = walker.next()) != null) {
            BatchHeader header = found.header();
            if (header.baseOffset() >= split.endOffset() && !header.isLegacyWrapper()) {
                return false;
            }
            if (header.isControl() || header.lastOffset() < split.startOffset()) {
                continue;
            }
            if (split.aborted().holds(header)) {
                continue;
            }
            if (header.magic() == 2 && header.recordCount() < 0) {
                throw BatchHeader.corrupt(split.source().name(), header.position(),
                        "invalid record count " + header.recordCount());
            }
            current = header;
            ByteBuffer batchBytes = found.bytes();
            guarded(() -> {
                if (header.magic() == 2) {
                    v2Records.open(batchBytes, header.recordCount());
                } else {
                    legacyRecords = openLegacy(MemoryRecords.readableRecords(batchBytes).batches().iterator().next());
                }
                return null;
            });
            batchOpen = true;
            return true;
        }
        return false;
    }

    private CloseableIterator<Record> openLegacy(RecordBatch entry) {
        entry.ensureValid(); // a v0/v1 entry (a wrapper too) by its CRC
        return entry.streamingIterator(buffers);
    }

    /** Append the current batch's selected records until the column batch is full. */
    private void drain() {
        guarded(() -> {
            if (legacyRecords == null) {
                drainV2();
            } else {
                drainLegacy();
            }
            return null;
        });
    }

    private void drainV2() {
        while (columns.rows() < split.batchRows() && v2Records.hasNext()) {
            v2Records.next();
            long offset = v2Records.offset();
            if (offset >= split.startOffset() && offset < split.endOffset()) {
                columns.append(v2Records, current.timestampTypeId());
            }
        }
        batchOpen = v2Records.hasNext();
    }

    private void drainLegacy() {
        while (columns.rows() < split.batchRows() && legacyRecords.hasNext()) {
            Record record = legacyRecords.next();
            record.ensureValid(); // and a wrapper's inner messages by theirs
            if (record.offset() >= split.startOffset() && record.offset() < split.endOffset()) {
                columns.append(record, current.timestampTypeId());
            }
        }
        if (!legacyRecords.hasNext()) {
            legacyRecords.close();
            legacyRecords = null;
            batchOpen = false;
        }
    }

    /** Kafka's decoding errors as the segment's corruption, where it was met. */
    private <T> T guarded(java.util.function.Supplier<T> step) {
        try {
            return step.get();
        } catch (KafkaException | BufferUnderflowException | IndexOutOfBoundsException
                | NegativeArraySizeException | IllegalArgumentException | IllegalStateException
                | ArithmeticException | UncheckedIOException error) {
            throw new CorruptSegmentException(split.source().name(), current.position(),
                    String.valueOf(error.getMessage()), error);
        }
    }

    @Override
    public void close() throws IOException {
        if (legacyRecords != null) {
            legacyRecords.close();
        }
        columns.close();
        if (bytes != null) {
            bytes.close();
        }
    }
}
