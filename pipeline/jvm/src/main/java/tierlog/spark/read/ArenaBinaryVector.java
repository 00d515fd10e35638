package tierlog.spark.read;

import java.util.Arrays;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarMap;
import org.apache.spark.unsafe.types.BinaryView;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * A binary column (a record's key or value) as positions into its column batch's
 * {@link ByteArena}: a row is its start and length there, -1 for null, so appending a row
 * copies nothing. As with Spark's own on-heap vector, {@link #getBinary} copies the row's
 * bytes out and {@link #getBinaryView} is a view of them, valid until the reader's next
 * batch. Only the binary getters are defined.
 */
final class ArenaBinaryVector extends ColumnVector {
    private final ByteArena arena;
    private final int[] starts;
    private final int[] lengths;
    private int rows;
    private int nulls;

    ArenaBinaryVector(DataType type, ByteArena arena, int capacity) {
        super(type);
        this.arena = arena;
        this.starts = new int[capacity];
        this.lengths = new int[capacity];
    }

    /** Append a row of {@code length} bytes from {@code start} in the arena; null when negative. */
    void append(int start, int length) {
        starts[rows] = start;
        lengths[rows] = length;
        if (length < 0) {
            nulls++;
        }
        rows++;
    }

    /** Empty the column for the next batch. */
    void reset() {
        rows = 0;
        nulls = 0;
    }

    @Override
    public byte[] getBinary(int rowId) {
        int length = lengths[rowId];
        if (length < 0) {
            return null;
        }
        int start = starts[rowId];
        return Arrays.copyOfRange(arena.bytes(), start, start + length);
    }

    @Override
    public BinaryView getBinaryView(int rowId) {
        int length = lengths[rowId];
        return length < 0 ? null : BinaryView.fromBytes(arena.bytes(), starts[rowId], length);
    }

    @Override
    public boolean isNullAt(int rowId) {
        return lengths[rowId] < 0;
    }

    @Override
    public boolean hasNull() {
        return nulls > 0;
    }

    @Override
    public int numNulls() {
        return nulls;
    }

    @Override
    public void close() {
        // nothing of its own to free: the arena is the reader's
    }

    @Override
    public boolean getBoolean(int rowId) {
        throw notBinary();
    }

    @Override
    public byte getByte(int rowId) {
        throw notBinary();
    }

    @Override
    public short getShort(int rowId) {
        throw notBinary();
    }

    @Override
    public int getInt(int rowId) {
        throw notBinary();
    }

    @Override
    public long getLong(int rowId) {
        throw notBinary();
    }

    @Override
    public float getFloat(int rowId) {
        throw notBinary();
    }

    @Override
    public double getDouble(int rowId) {
        throw notBinary();
    }

    @Override
    public ColumnarArray getArray(int rowId) {
        throw notBinary();
    }

    @Override
    public ColumnarMap getMap(int rowId) {
        throw notBinary();
    }

    @Override
    public Decimal getDecimal(int rowId, int precision, int scale) {
        throw notBinary();
    }

    @Override
    public UTF8String getUTF8String(int rowId) {
        throw notBinary();
    }

    @Override
    public ColumnVector getChild(int ordinal) {
        throw notBinary();
    }

    private static UnsupportedOperationException notBinary() {
        return new UnsupportedOperationException("a key or value column holds only binary");
    }
}
