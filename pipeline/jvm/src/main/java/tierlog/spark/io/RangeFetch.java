package tierlog.spark.io;

import java.io.IOException;
import java.io.InterruptedIOException;
import java.nio.ByteBuffer;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;

/**
 * A ranged read under way on one of {@link S3Ranges}' GET threads, and the wait for it.
 *
 * <p>Why another thread: {@link java.net.HttpURLConnection} blocks in the socket's read, and
 * {@link Thread#interrupt()} does not end that for a platform thread, while Spark kills a
 * task by interrupting its thread. The task's thread waits here instead, which an
 * interrupt ends at once; the GET's thread is interrupted too and stops at its next read,
 * or when its read timeout expires if the server sends nothing more, and then closes
 * the connection. The same future serves {@link S3Source}'s read ahead.
 */
final class RangeFetch {
    private final String what;
    private final Future<ByteBuffer> result;

    RangeFetch(String what, Future<ByteBuffer> result) {
        this.what = what;
        this.result = result;
    }

    /**
     * The bytes, once the GET's attempts are over.
     *
     * @throws InterruptedIOException if this thread was interrupted meanwhile (the GET is
     *     cancelled, and the thread's interrupt flag stays set)
     */
    ByteBuffer await() throws IOException {
        try {
            return result.get();
        } catch (InterruptedException e) {
            cancel();
            Thread.currentThread().interrupt();
            throw new InterruptedIOException("interrupted during " + what);
        } catch (ExecutionException e) {
            Throwable cause = e.getCause();
            if (cause instanceof IOException io) {
                throw io; // thrown on the GET's thread, with this read in its message
            }
            if (cause instanceof RuntimeException unchecked) {
                throw unchecked;
            }
            if (cause instanceof Error error) {
                throw error;
            }
            throw new IOException(what + " failed", cause);
        }
    }

    /** Nobody will wait for these bytes: the GET stops at its next read or retry. */
    void cancel() {
        result.cancel(true);
    }
}
