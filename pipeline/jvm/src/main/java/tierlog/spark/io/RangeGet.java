package tierlog.spark.io;

import java.io.IOException;
import java.io.InputStream;
import java.io.InterruptedIOException;
import java.net.HttpURLConnection;
import java.net.ProtocolException;
import java.net.SocketTimeoutException;
import java.net.URI;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.Set;
import java.util.SortedMap;
import java.util.TreeMap;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * One signed ranged GET and what its answer means: the bytes, a failure worth another
 * attempt ({@link Retryable}), or a failure for good ({@link S3ReadException}).
 *
 * <p>Sent with {@link HttpURLConnection}: it reads the body straight from the socket into
 * the array the caller gives, and its read timeout counts from the last bytes that
 * came, which is the stall rule. {@code java.net.http} copied the body through its
 * publisher's small buffers and read 3-4x slower than boto3 from the same MinIO (issue 21).
 * Kept-alive connections are reused through the JDK's own cache.
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
    private static final int ERROR_BODY_MAX_BYTES = 64 * 1024; // S3's error XML is ~300 bytes
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
    private final byte[] into;
    private final URI uri;
    private final String range;

    /** @param into where the bytes go, from index 0: at least {@code length} long */
    RangeGet(S3Connection connection, String bucket, String key, long offset, int length,
            byte[] into) {
        this.connection = connection;
        this.bucket = bucket;
        this.key = key;
        this.offset = offset;
        this.length = length;
        this.into = into;
        this.uri = connection.objectUri(bucket, key);
        this.range = "bytes=" + offset + "-" + (offset + length - 1);
    }

    /**
     * One attempt: the {@code length} bytes asked for, in {@code into} from position 0 (the
     * limit {@code length}). A failed attempt's
     * connection is closed, never reused: its stream may be anywhere in a body.
     *
     * @throws InterruptedIOException if the thread was interrupted between two reads
     */
    ByteBuffer send() throws IOException, Retryable {
        HttpURLConnection http = signed(Instant.now());
        boolean answered = false;
        try {
            ByteBuffer bytes = answer(http);
            answered = true;
            return bytes;
        } finally {
            if (!answered) {
                http.disconnect();
            }
        }
    }

    private HttpURLConnection signed(Instant now) throws IOException {
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
        HttpURLConnection http = (HttpURLConnection) uri.toURL().openConnection();
        // S3's 301 to a bucket's own region is an error to see, not to chase unsigned.
        http.setInstanceFollowRedirects(false);
        http.setUseCaches(false);
        http.setConnectTimeout(connection.connectTimeoutMillis());
        http.setReadTimeout(connection.readTimeoutMillis());
        http.setRequestProperty("Authorization", authorization);
        headers.remove("host"); // HttpURLConnection writes it, and ignores being told
        headers.forEach(http::setRequestProperty);
        return http;
    }

    /**
     * The Host header as HttpURLConnection writes it (the port only when not the scheme's
     * default), so that the signature covers what is actually sent.
     */
    private static String hostHeader(URI uri) {
        int port = uri.getPort();
        boolean defaultPort = port == -1 || port == ("https".equals(uri.getScheme()) ? 443 : 80);
        return defaultPort ? uri.getHost() : uri.getHost() + ":" + port;
    }

    private ByteBuffer answer(HttpURLConnection http) throws IOException, Retryable {
        int status;
        try {
            http.connect();
        } catch (IOException e) {
            throw failed(e);
        }
        try {
            status = http.getResponseCode();
        } catch (SocketTimeoutException e) {
            throw new Retryable(
                    "no answer within " + connection.readTimeoutMillis() + " ms", 0, "", e);
        } catch (IOException e) {
            throw failed(e);
        }
        if (status == 206) {
            return body(http);
        }
        if (status < 100) {
            throw new S3ReadException(this + ": the answer is not HTTP", 0, "", null);
        }
        if (status < 300) {
            throw new S3ReadException(this + ": the server answered " + status
                    + " instead of 206: it ignored the Range header", status, "", null);
        }
        throw refusal(http, status);
    }

    /**
     * A transport failure: thrown as {@link Retryable} when another attempt may get
     * through, returned for the caller to throw when the answer was garbled.
     */
    private IOException failed(IOException cause) throws Retryable {
        if (cause instanceof ProtocolException) {
            return new S3ReadException(this + ": " + cause.getMessage(), 0, "", cause);
        }
        throw new Retryable(cause.toString(), 0, "", cause);
    }

    /** The bytes of a 206, checked to be the range asked for, all of it and no more. */
    private ByteBuffer body(HttpURLConnection http) throws IOException, Retryable {
        String contentRange = String.valueOf(http.getHeaderField("Content-Range"));
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
        if (served > length) {
            throw new S3ReadException(this + ": the server sent more than the " + length
                    + " bytes asked for", 206, "", null);
        }
        try (InputStream in = http.getInputStream()) {
            int filled = 0;
            while (filled < length) {
                if (Thread.currentThread().isInterrupted()) { // the reader gave up on it
                    throw new InterruptedIOException("interrupted during " + this);
                }
                int read = in.read(into, filled, length - filled);
                if (read < 0) { // the connection ended early
                    throw new Retryable("the body ended after " + filled + " of " + length
                            + " bytes", 206, "", null);
                }
                filled += read;
            }
        } catch (SocketTimeoutException e) {
            throw new Retryable(
                    "the body stalled for " + connection.readTimeoutMillis() + " ms", 0, "", e);
        } catch (InterruptedIOException e) {
            throw e;
        } catch (IOException e) {
            throw failed(e);
        }
        return ByteBuffer.wrap(into, 0, length);
    }

    /**
     * An S3 error answer: thrown as {@link Retryable} if the server is failing or
     * throttling, else returned for the caller to throw.
     */
    private IOException refusal(HttpURLConnection http, int status) throws Retryable {
        String xml = errorBody(http, status);
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
        String requestId = http.getHeaderField("x-amz-request-id");
        if (requestId != null) {
            reason.append(" [request id ").append(requestId).append(']');
        }
        if (status >= 500 || status == 429 || RETRYABLE_CODES.contains(code)) {
            throw new Retryable(reason.toString(), status, code, null);
        }
        return new S3ReadException(this + ": " + reason, status, code, null);
    }

    /** The error answer's body, or "" if it has none or it cannot be read: the status says enough. */
    private static String errorBody(HttpURLConnection http, int status) {
        try (InputStream in = status >= 400 ? http.getErrorStream() : http.getInputStream()) {
            return in == null ? ""
                    : new String(in.readNBytes(ERROR_BODY_MAX_BYTES), StandardCharsets.UTF_8);
        } catch (IOException e) {
            return "";
        }
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
