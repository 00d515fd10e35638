package tierlog.spark.io;

import java.io.IOException;
import java.io.InterruptedIOException;
import java.net.ProtocolException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.Set;
import java.util.SortedMap;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * One signed ranged GET and what its answer means: the bytes, a failure worth another
 * attempt ({@link Retryable}), or a failure for good ({@link S3ReadException}).
 *
 * <p>Signed afresh for each attempt, since the signature covers the time and S3 refuses
 * one more than 15 minutes old. The payload is signed as the empty body's SHA-256 (a GET
 * has none), which every S3-compatible server accepts, unlike {@code UNSIGNED-PAYLOAD}.
 */
final class RangeGet {
    private static final DateTimeFormatter AMZ_DATE =
            DateTimeFormatter.ofPattern("yyyyMMdd'T'HHmmss'Z'").withZone(ZoneOffset.UTC);
    private static final Pattern CONTENT_RANGE = Pattern.compile("bytes (\\d+)-(\\d+)/(\\d+|\\*)");
    private static final Pattern ERROR_CODE = Pattern.compile("<Code>([^<]*)</Code>");
    private static final Pattern ERROR_MESSAGE = Pattern.compile("<Message>([^<]*)</Message>");
    // Worth another attempt besides any 5xx and 429: the server is overloaded or failed,
    // or the clocks disagree for now. The same list as the Python S3 store's.
    private static final Set<String> RETRYABLE_CODES = Set.of(
            "SlowDown", "Throttling", "ThrottlingException", "RequestTimeout",
            "RequestTimeTooSkewed", "InternalError", "ServiceUnavailable", "IncompleteBody");

    private final S3Connection connection;
    private final String bucket;
    private final String key;
    private final long offset;
    private final int length;
    private final URI uri;
    private final String range;

    RangeGet(S3Connection connection, String bucket, String key, long offset, int length) {
        this.connection = connection;
        this.bucket = bucket;
        this.key = key;
        this.offset = offset;
        this.length = length;
        this.uri = connection.objectUri(bucket, key);
        this.range = "bytes=" + offset + "-" + (offset + length - 1);
    }

    /** One attempt: the {@code length} bytes asked for, positioned at 0. */
    ByteBuffer send(HttpClient client) throws IOException, Retryable {
        RangeBody body = new RangeBody(length);
        CompletableFuture<HttpResponse<ByteBuffer>> sent = client.sendAsync(signed(Instant.now()),
                answer -> answer.statusCode() < 300 ? body
                        : HttpResponse.BodySubscribers.mapping(
                                HttpResponse.BodySubscribers.ofByteArray(), ByteBuffer::wrap));
        HttpResponse<ByteBuffer> response = await(sent, body);
        if (response.statusCode() == 206) {
            return checkedRange(response);
        }
        if (response.statusCode() < 300) {
            throw new S3ReadException(this + ": the server answered " + response.statusCode()
                    + " instead of 206: it ignored the Range header",
                    response.statusCode(), "", null);
        }
        throw refusal(response);
    }

    private HttpRequest signed(Instant now) {
        String amzDate = AMZ_DATE.format(now);
        SortedMap<String, String> headers = new TreeMap<>();
        headers.put("host", hostHeader(uri));
        headers.put("range", range);
        headers.put("x-amz-content-sha256", SigV4.EMPTY_PAYLOAD_SHA256);
        headers.put("x-amz-date", amzDate);
        if (connection.sessionToken() != null) {
            headers.put("x-amz-security-token", connection.sessionToken());
        }
        String authorization = SigV4.authorization("GET", uri.getRawPath(), "", headers,
                SigV4.EMPTY_PAYLOAD_SHA256, connection.accessKeyId(), connection.secretAccessKey(),
                connection.region(), "s3", amzDate);
        HttpRequest.Builder request =
                HttpRequest.newBuilder(uri).GET().header("Authorization", authorization);
        headers.remove("host"); // java.net.http sets it, and refuses to be told
        headers.forEach(request::header);
        return request.build();
    }

    /**
     * The Host header as java.net.http writes it (the port only when not the scheme's
     * default), so that the signature covers what is actually sent.
     */
    private static String hostHeader(URI uri) {
        int port = uri.getPort();
        boolean defaultPort = port == -1 || port == ("https".equals(uri.getScheme()) ? 443 : 80);
        return defaultPort ? uri.getHost() : uri.getHost() + ":" + port;
    }

    /**
     * The response, or a {@link Retryable} once nothing arrived for the read timeout (the
     * connect timeout on top before the answer's headers): java.net.http's own timeout
     * ends at the headers, and a body that stalls half way must end the attempt too.
     */
    private HttpResponse<ByteBuffer> await(
            CompletableFuture<HttpResponse<ByteBuffer>> sent, RangeBody body)
            throws IOException, Retryable {
        long startedNanos = System.nanoTime();
        long readNanos = TimeUnit.MILLISECONDS.toNanos(connection.readTimeoutMillis());
        long firstNanos =
                TimeUnit.MILLISECONDS.toNanos(connection.connectTimeoutMillis()) + readNanos;
        while (true) {
            long lastArrival = body.lastArrivalNanos();
            long deadline = lastArrival == 0 ? startedNanos + firstNanos : lastArrival + readNanos;
            long waitNanos = deadline - System.nanoTime();
            if (waitNanos <= 0) {
                sent.cancel(true);
                String reason = lastArrival == 0
                        ? "no answer within " + TimeUnit.NANOSECONDS.toMillis(firstNanos) + " ms"
                        : "the body stalled for " + connection.readTimeoutMillis() + " ms";
                throw new Retryable(reason, 0, "", null);
            }
            try {
                // A quarter of the read timeout at most, so that a stall is seen soon after
                // its deadline even when the answer came long before the first one.
                return sent.get(Math.min(waitNanos, readNanos / 4 + 1), TimeUnit.NANOSECONDS);
            } catch (TimeoutException e) {
                // Look again: bytes may have arrived meanwhile, moving the deadline.
            } catch (ExecutionException e) {
                throw failed(e.getCause());
            } catch (InterruptedException e) {
                sent.cancel(true);
                Thread.currentThread().interrupt();
                throw new InterruptedIOException("interrupted during " + this);
            }
        }
    }

    /**
     * A transport failure: thrown as {@link Retryable} when another attempt may get
     * through, returned for the caller to throw when the answer was garbled.
     */
    private IOException failed(Throwable cause) throws Retryable {
        if (cause instanceof ProtocolException) {
            return new S3ReadException(this + ": " + cause.getMessage(), 0, "", cause);
        }
        if (cause instanceof IOException) {
            throw new Retryable(cause.toString(), 0, "", cause);
        }
        return new IOException(this + ": " + cause, cause);
    }

    /** The bytes of a 206, checked to be the range asked for and all of it. */
    private ByteBuffer checkedRange(HttpResponse<ByteBuffer> response)
            throws IOException, Retryable {
        String contentRange = response.headers().firstValue("content-range").orElse("");
        Matcher parts = CONTENT_RANGE.matcher(contentRange);
        if (!parts.matches() || Long.parseLong(parts.group(1)) != offset) {
            throw new S3ReadException(
                    this + ": the answer's Content-Range is '" + contentRange + "'", 206, "", null);
        }
        long served = Long.parseLong(parts.group(2)) - offset + 1;
        if (served < length) {
            throw new S3ReadException(this + ": short read: the object is " + parts.group(3)
                    + " bytes long, so only " + served + " of the " + length + " bytes asked exist",
                    206, "", null);
        }
        ByteBuffer bytes = response.body();
        if (bytes.remaining() < length) { // the connection ended early
            throw new Retryable("the body ended after " + bytes.remaining() + " of " + length
                    + " bytes", 206, "", null);
        }
        return bytes;
    }

    /**
     * An S3 error answer: thrown as {@link Retryable} if the server is failing or
     * throttling, else returned for the caller to throw.
     */
    private IOException refusal(HttpResponse<ByteBuffer> response) throws Retryable {
        int status = response.statusCode();
        String xml = StandardCharsets.UTF_8.decode(response.body()).toString();
        String code = firstGroup(ERROR_CODE, xml);
        StringBuilder reason = new StringBuilder().append(status);
        if (!code.isEmpty()) {
            reason.append(' ').append(code);
        }
        String message = firstGroup(ERROR_MESSAGE, xml);
        if (!message.isEmpty()) {
            reason.append(": ").append(message);
        }
        if (status == 416) {
            reason.append(" (the range starts at or past the object's end)");
        }
        response.headers().firstValue("x-amz-request-id")
                .ifPresent(id -> reason.append(" [request id ").append(id).append(']'));
        if (status >= 500 || status == 429 || RETRYABLE_CODES.contains(code)) {
            throw new Retryable(reason.toString(), status, code, null);
        }
        return new S3ReadException(this + ": " + reason, status, code, null);
    }

    private static String firstGroup(Pattern pattern, String text) {
        Matcher found = pattern.matcher(text);
        return found.find() ? found.group(1) : "";
    }

    @Override
    public String toString() {
        return "S3 GET s3://" + bucket + "/" + key + " " + range;
    }

    /** An attempt that failed in a way the next one may not; carries S3's answer if any. */
    static final class Retryable extends Exception {
        private static final long serialVersionUID = 1L;

        private final int statusCode;
        private final String errorCode;

        Retryable(String reason, int statusCode, String errorCode, Throwable cause) {
            super(reason, cause);
            this.statusCode = statusCode;
            this.errorCode = errorCode;
        }

        int statusCode() {
            return statusCode;
        }

        String errorCode() {
            return errorCode;
        }
    }
}
