package tierlog.spark.read;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/** Readers of splits as column batches of the columns the query needs (never rows). */
public final class SplitReaderFactory implements PartitionReaderFactory {
    private static final long serialVersionUID = 1L;
    private final StructType required;

    public SplitReaderFactory(StructType required) {
        this.required = required;
    }

    @Override
    public boolean supportColumnarReads(InputPartition partition) {
        return true;
    }

    @Override
    public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
        return new ColumnarSplitReader((InputSplit) partition, required);
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
        throw new UnsupportedOperationException("tierlog splits are read as column batches");
    }
}
