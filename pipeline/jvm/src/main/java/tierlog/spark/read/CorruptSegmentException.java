package tierlog.spark.read;

/**
 * Bytes of a segment that do not hold what a Kafka batch must (Kafka's CORRUPT_MESSAGE), with
 * the segment and the position of the batch, so an operator can find them.
 */
public final class CorruptSegmentException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    public CorruptSegmentException(String segment, long position, String reason, Throwable cause) {
        super("CORRUPT_MESSAGE: " + segment + " at position " + position + ": " + reason, cause);
    }
}
