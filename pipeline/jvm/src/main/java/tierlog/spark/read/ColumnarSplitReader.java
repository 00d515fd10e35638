package tierlog.spark.read;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.BufferUnderflowException;
import java.nio.ByteBuffer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.record.DefaultRecordBatch;
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
 * One split's selected records as column batches, decoded by Kafka's own record classes
 * (every magic and codec), by the rules the planner's splits are made for (the same as
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
    private final RecordColumns columns;
    private final BufferSupplier buffers = BufferSupplier.create();
    private SegmentBytes bytes;
    private BatchWalker walker;
    private CloseableIterator<Record> records;
    private BatchHeader current;
    private boolean done;

    ColumnarSplitReader(InputSplit split, StructType required) {
        this.split = split;
        this.columns = new RecordColumns(required, split.topic(), split.partition(), split.batchRows());
    }

    @Override
    public boolean next() throws IOException {
        columns.reset();
        while (columns.rows() < split.batchRows() && !done) {
            if (records == null && !nextBatch()) {
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
            records = guarded(() -> open(MemoryRecords.readableRecords(batchBytes).batches().iterator().next()));
            return true;
        }
        return false;
    }

    private CloseableIterator<Record> open(RecordBatch batch) {
        if (batch.magic() < 2) {
            batch.ensureValid(); // a v0/v1 entry (a wrapper too) by its CRC
        }
        if (!columns.needsPayload() && batch instanceof DefaultRecordBatch v2) {
            return v2.skipKeyValueIterator(buffers);
        }
        return batch.streamingIterator(buffers);
    }

    /** Append the current batch's selected records until the column batch is full. */
    private void drain() {
        guarded(() -> {
            while (columns.rows() < split.batchRows() && records.hasNext()) {
                Record record = records.next();
                if (current.magic() < 2) {
                    record.ensureValid(); // and a wrapper's inner messages by theirs
                }
                if (record.offset() >= split.startOffset() && record.offset() < split.endOffset()) {
                    columns.append(record, current.timestampTypeId());
                }
            }
            if (!records.hasNext()) {
                records.close();
                records = null;
            }
            return null;
        });
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
        if (records != null) {
            records.close();
        }
        columns.close();
        if (bytes != null) {
            bytes.close();
        }
    }
}
