package tierlog.spark.stream;

import java.util.Map;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.types.StructType;
import tierlog.spark.Planners;
import tierlog.spark.read.SplitPlan;
import tierlog.spark.read.SplitReaderFactory;

/**
 * {@code readStream.format("tierlog")}: each micro-batch reads every partition from where the
 * last one ended up to its last stable offset, planned by the Python planner. Nothing to
 * acknowledge on commit: the log is read, never consumed.
 */
public final class TierlogMicroBatchStream implements MicroBatchStream {
    private final String optionsJson;
    private final StructType required;

    public TierlogMicroBatchStream(Map<String, String> options, StructType required) {
        this.optionsJson = Planners.toJson(options);
        this.required = required;
    }

    @Override
    public Offset initialOffset() {
        return new TierlogOffset(Planners.ask(planner -> planner.initialOffsets(optionsJson)).asText());
    }

    @Override
    public Offset latestOffset() {
        return new TierlogOffset(Planners.ask(planner -> planner.latestOffsets(optionsJson)).asText());
    }

    @Override
    public Offset deserializeOffset(String json) {
        return new TierlogOffset(json);
    }

    @Override
    public InputPartition[] planInputPartitions(Offset start, Offset end) {
        String from = start.json();
        String to = end.json();
        return SplitPlan.parse(Planners.ask(planner -> planner.planStream(optionsJson, from, to)));
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
        return new SplitReaderFactory(required);
    }

    @Override
    public void commit(Offset end) {}

    @Override
    public void stop() {}
}
