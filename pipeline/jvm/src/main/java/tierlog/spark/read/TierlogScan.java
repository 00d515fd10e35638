package tierlog.spark.read;

import java.util.Map;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.types.StructType;
import tierlog.spark.Planners;
import tierlog.spark.stream.TierlogMicroBatchStream;

/** One query's scan: its splits come from the Python planner, its rows from the JVM. */
final class TierlogScan implements Scan, Batch {
    private final Map<String, String> options;
    private final StructType required;
    private final String filtersJson;

    TierlogScan(Map<String, String> options, StructType required, String filtersJson) {
        this.options = options;
        this.required = required;
        this.filtersJson = filtersJson;
    }

    @Override
    public StructType readSchema() {
        return required;
    }

    @Override
    public String description() {
        return "tierlog " + options.getOrDefault("path", options.getOrDefault("paths", ""));
    }

    @Override
    public Batch toBatch() {
        return this;
    }

    @Override
    public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
        return new TierlogMicroBatchStream(options, required);
    }

    @Override
    public InputPartition[] planInputPartitions() {
        String optionsJson = Planners.toJson(options);
        return SplitPlan.parse(Planners.ask(planner -> planner.planBatch(optionsJson, filtersJson)));
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
        return new SplitReaderFactory(required);
    }
}
