package tierlog.spark.io;

import static java.lang.System.Logger.Level.WARNING;

import java.io.IOException;
import java.io.InterruptedIOException;
import java.net.http.HttpClient;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentMap;
import java.util.concurrent.ThreadLocalRandom;

/**
 * Byte ranges of S3 objects, for Spark executors reading tiered segments.
 *
 * <p>One ranged GET per read, retried like tierlog's Python S3 store retries
 * ({@code tierlog.storage.tier.s3_store}): 5xx, throttling, timeouts and dropped
 * connections get another attempt after an exponential backoff with full jitter, so that
 * many executors throttled at once do not come back at once; a refusal (denied, no such
 * key, a range past the end) fails at once. Each retry is logged at WARNING, which is how
 * an executor's log shows a struggling S3.
 *
 * <p>Executors read many ranges, and an {@link HttpClient} (its selector thread, its
 * connection pool) is costly to make, so one client is shared per JVM by every read whose
 * connection has the same connect timeout, the one setting a client holds (endpoint, keys
 * and read timeout belong to each request).
 */
public final class S3Ranges {
    private static final System.Logger LOG = System.getLogger(S3Ranges.class.getName());
    private static final long BACKOFF_BASE_MILLIS = 100; // the first retry waits up to this
    private static final long BACKOFF_MAX_MILLIS = 5_000;
    private static final ConcurrentMap<Integer, HttpClient> CLIENTS = new ConcurrentHashMap<>();

    private S3Ranges() {}

    /**
     * Bytes [offset, offset+length) of s3://bucket/key: one ranged GET, retried on
     * 5xx/throttling/IO errors with jittered exponential backoff up to maxAttempts.
     *
     * @return a buffer of exactly {@code length} bytes, positioned at 0
     * @throws S3ReadException if S3 refused the read (its status and error code in the
     *     message), the object ends before {@code offset + length}, or every attempt failed
     * @throws InterruptedIOException if the thread was interrupted (a killed Spark task)
     */
    public static ByteBuffer read(
            S3Connection connection, String bucket, String key, long offset, int length)
            throws IOException {
        if (bucket == null || bucket.isEmpty() || key == null || key.isEmpty()) {
            throw new IllegalArgumentException(
                    "an S3 read needs a bucket and a key, got s3://" + bucket + "/" + key);
        }
        if (offset < 0 || length < 0) {
            throw new IllegalArgumentException(
                    "negative S3 range: offset " + offset + ", length " + length);
        }
        if (length == 0) {
            return ByteBuffer.allocate(0);
        }
        RangeGet get = new RangeGet(connection, bucket, key, offset, length);
        HttpClient client = client(connection.connectTimeoutMillis());
        for (int attempt = 1; ; attempt++) {
            try {
                return get.send(client);
            } catch (RangeGet.Retryable failure) {
                if (attempt >= connection.maxAttempts()) {
                    throw new S3ReadException(
                            get + ": " + failure.getMessage() + "; gave up after " + attempt
                                    + " attempts",
                            failure.statusCode(), failure.errorCode(), failure.getCause());
                }
                long waitMillis = backoffMillis(attempt);
                LOG.log(WARNING, get + ": " + failure.getMessage() + "; attempt " + attempt + " of "
                        + connection.maxAttempts() + " failed, retrying in " + waitMillis + " ms");
                sleep(waitMillis);
            }
        }
    }

    /** Full jitter: uniform in [0, min(max, base * 2^(n-1))] after the n-th failure. */
    private static long backoffMillis(int failedAttempts) {
        long ceiling = BACKOFF_BASE_MILLIS << Math.min(failedAttempts - 1, 20);
        return ThreadLocalRandom.current().nextLong(Math.min(BACKOFF_MAX_MILLIS, ceiling) + 1);
    }

    private static void sleep(long millis) throws InterruptedIOException {
        try {
            Thread.sleep(millis);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new InterruptedIOException("interrupted while waiting to retry an S3 read");
        }
    }

    /**
     * HTTP/1.1 (what S3 speaks; no h2c upgrade to refuse), redirects not followed (S3's 301
     * to a bucket's own region is an error to see, not to chase unsigned).
     */
    private static HttpClient client(int connectTimeoutMillis) {
        return CLIENTS.computeIfAbsent(connectTimeoutMillis, millis -> HttpClient.newBuilder()
                .version(HttpClient.Version.HTTP_1_1)
                .followRedirects(HttpClient.Redirect.NEVER)
                .connectTimeout(Duration.ofMillis(millis))
                .build());
    }
}
