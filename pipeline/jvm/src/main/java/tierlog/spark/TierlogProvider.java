package tierlog.spark;

import java.util.Map;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * {@code format("tierlog")}: Kafka-format log dirs and tiers as the Kafka source's rows, for
 * {@code spark.read} and {@code spark.readStream}. Found by its short name through
 * META-INF/services, ahead of any Python source of the same name.
 */
public final class TierlogProvider implements TableProvider, DataSourceRegister {
    @Override
    public String shortName() {
        return "tierlog";
    }

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        return KafkaSchema.of(KafkaSchema.includeHeaders(options));
    }

    @Override
    public Table getTable(
            StructType schema, Transform[] partitioning, Map<String, String> properties) {
        return new TierlogTable(schema);
    }
}
