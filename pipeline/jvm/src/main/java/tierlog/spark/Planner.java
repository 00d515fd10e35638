package tierlog.spark;

/**
 * The query planning that stays in Python (tierlog.pipeline.source), called back from the
 * driver's JVM through py4j's callback server.
 *
 * <p>Strings in and out, JSON both ways, so the contract is visible in one place and needs no
 * py4j object conversions. Every answer is an object with either an {@code "ok"} member (the
 * result) or an {@code "error"} member ({@code type}, {@code message}): a planning error keeps
 * its tierlog type name when it crosses into Spark.
 */
public interface Planner {
    /** The splits of a batch query: {@code options} as given, {@code filters} as pushed. */
    String planBatch(String optionsJson, String filtersJson);

    /** Where a new streaming query starts: {@code {"topic": {"partition": offset}}}. */
    String initialOffsets(String optionsJson);

    /** The next offset past each partition's last stable offset, in the same shape. */
    String latestOffsets(String optionsJson);

    /** The splits of one micro-batch, {@code [start, end)} in each partition. */
    String planStream(String optionsJson, String startJson, String endJson);
}
