package tierlog.spark.read;

import org.apache.spark.sql.connector.read.InputPartition;
import tierlog.spark.io.SegmentSource;

/**
 * Decode {@code source}'s bytes {@code [startPosition, endPosition)}, keeping the offsets
 * {@code [startOffset, endOffset)} but the transactional batches of aborted transactions (the
 * Python planner's InputSplit, planner.py), into column batches of at most {@code batchRows}.
 */
public record InputSplit(
        String topic,
        int partition,
        SegmentSource source,
        long startPosition,
        long endPosition,
        long startOffset,
        long endOffset,
        AbortedTransactions aborted,
        int batchRows)
        implements InputPartition {}
