package tierlog.spark;

import java.util.EnumSet;
import java.util.HashMap;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import tierlog.spark.read.TierlogScanBuilder;

/** The table behind one {@code load()}: read in batches or as a stream of micro-batches. */
final class TierlogTable implements SupportsRead {
    private final StructType schema;

    TierlogTable(StructType schema) {
        this.schema = schema;
    }

    @Override
    public String name() {
        return "tierlog";
    }

    @Override
    @SuppressWarnings("deprecation") // Spark 4 prefers columns(), whose default reads this
    public StructType schema() {
        return schema;
    }

    @Override
    public Set<TableCapability> capabilities() {
        return EnumSet.of(TableCapability.BATCH_READ, TableCapability.MICRO_BATCH_READ);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
        return new TierlogScanBuilder(new HashMap<>(options.asCaseSensitiveMap()), schema);
    }
}
