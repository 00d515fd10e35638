package tierlog.spark.read;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.StructType;

/**
 * Takes what Spark pushes down: the columns a query needs (the others are never decoded) and
 * its filters, which the Python planner turns into row bounds. Every filter is also handed
 * back to Spark, which checks it again on the rows: planning may only prune.
 */
public final class TierlogScanBuilder
        implements ScanBuilder, SupportsPushDownFilters, SupportsPushDownRequiredColumns {
    private final Map<String, String> options;
    private StructType required;
    private Filter[] pushed = new Filter[0];

    public TierlogScanBuilder(Map<String, String> options, StructType schema) {
        this.options = options;
        this.required = schema;
    }

    @Override
    public Filter[] pushFilters(Filter[] filters) {
        List<Filter> understood = new ArrayList<>();
        for (Filter filter : filters) {
            if (FilterJson.of(filter) != null) {
                understood.add(filter);
            }
        }
        pushed = understood.toArray(new Filter[0]);
        return filters;
    }

    @Override
    public Filter[] pushedFilters() {
        return pushed;
    }

    @Override
    public void pruneColumns(StructType requiredSchema) {
        required = requiredSchema;
    }

    @Override
    public Scan build() {
        return new TierlogScan(options, required, FilterJson.all(pushed));
    }
}
