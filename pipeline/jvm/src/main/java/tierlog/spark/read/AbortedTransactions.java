package tierlog.spark.read;

import java.io.Serializable;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Map;

/**
 * Answers "is this batch aborted data?" for one split, by the rule of transactions.py's
 * AbortedRanges: a producer has one transaction at a time, so its transactional batches
 * between an aborted transaction's first offset and its ABORT marker are that transaction's.
 */
public final class AbortedTransactions implements Serializable {
    private static final long serialVersionUID = 1L;

    /** Per producer: first offsets ascending, and the last offset of each range. */
    private final Map<Long, long[][]> byProducer;

    /** {@code ranges}: (producer id, first offset, last offset) triples. */
    public AbortedTransactions(long[][] ranges) {
        Map<Long, long[][]> grouped = new HashMap<>();
        for (long[] range : ranges) {
            long[][] known = grouped.getOrDefault(range[0], new long[0][]);
            long[][] grown = Arrays.copyOf(known, known.length + 1);
            grown[known.length] = new long[] {range[1], range[2]};
            grouped.put(range[0], grown);
        }
        for (long[][] producerRanges : grouped.values()) {
            Arrays.sort(producerRanges, (a, b) -> Long.compare(a[0], b[0]));
        }
        this.byProducer = grouped;
    }

    /** Whether a batch so described lies inside an aborted transaction of its producer. */
    public boolean holds(BatchHeader header) {
        if (!header.isTransactional() || header.isControl()) {
            return false;
        }
        long[][] ranges = byProducer.get(header.producerId());
        if (ranges == null) {
            return false;
        }
        long base = header.baseOffset();
        for (int slot = ranges.length - 1; slot >= 0; slot--) {
            if (ranges[slot][0] <= base) {
                return base <= ranges[slot][1];
            }
        }
        return false;
    }
}
