package tierlog.spark.io;

import java.io.IOException;
import java.io.Serializable;

/**
 * Where a split's segment bytes are: a local {@code .log} file, a {@code file://} tier's
 * object file, an {@code s3://} tier's object. Small and serializable: it travels in the split
 * to an executor, which opens it there.
 */
public interface SegmentSource extends Serializable {
    /** The segment as an operator names it, for error messages. */
    String name();

    SegmentBytes open() throws IOException;
}
