package tierlog.spark.io;

import java.io.Serializable;
import java.net.URI;
import java.net.URISyntaxException;
import java.util.Objects;

/**
 * Where a bucket is and who reads it: the settings an executor needs to sign and send a
 * ranged GET, built once on the driver and shipped to executors with the scan.
 *
 * <p>A value (equal settings are equal). The secret and the session token never appear in
 * {@link #toString()}: connections end up in logs and Spark UIs.
 */
public final class S3Connection implements Serializable {
    private static final long serialVersionUID = 1L;

    private final String endpoint;
    private final String region;
    private final String accessKeyId;
    private final String secretAccessKey;
    private final String sessionToken;
    private final boolean pathStyle;
    private final int connectTimeoutMillis;
    private final int readTimeoutMillis;
    private final int maxAttempts;

    /**
     * @param endpoint {@code http(s)://host[:port]} of an S3-compatible server (MinIO, Ceph),
     *     or null for AWS ({@code https://s3.<region>.amazonaws.com})
     * @param sessionToken the temporary credentials' token, or null for long-lived keys
     * @param pathStyle the bucket in the path ({@code host/bucket/key}) rather than in the
     *     host name ({@code bucket.host/key}); S3-compatible servers usually need it
     * @param readTimeoutMillis the longest wait for the answer, and then between two pieces
     *     of its body, before the attempt counts as failed
     * @param maxAttempts attempts per read, the first included
     */
    public S3Connection(
            String endpoint,
            String region,
            String accessKeyId,
            String secretAccessKey,
            String sessionToken,
            boolean pathStyle,
            int connectTimeoutMillis,
            int readTimeoutMillis,
            int maxAttempts) {
        this.endpoint = endpoint == null ? null : checkEndpoint(endpoint);
        this.region = required(region, "region");
        this.accessKeyId = required(accessKeyId, "access key id");
        this.secretAccessKey = required(secretAccessKey, "secret access key");
        this.sessionToken = sessionToken == null || sessionToken.isEmpty() ? null : sessionToken;
        this.pathStyle = pathStyle;
        this.connectTimeoutMillis = positive(connectTimeoutMillis, "connect timeout");
        this.readTimeoutMillis = positive(readTimeoutMillis, "read timeout");
        this.maxAttempts = positive(maxAttempts, "max attempts");
    }

    /** The URL of an object: its key URI-encoded once, as the signature's canonical URI. */
    public URI objectUri(String bucket, String key) {
        String base = endpoint != null ? endpoint : "https://s3." + region + ".amazonaws.com";
        String path = "/" + SigV4.encodeKey(key);
        if (pathStyle) {
            return URI.create(base + "/" + SigV4.encodeKey(bucket) + path);
        }
        URI server = URI.create(base);
        String authority = bucket + "." + server.getRawAuthority();
        return URI.create(server.getScheme() + "://" + authority + path);
    }

    String region() {
        return region;
    }

    String accessKeyId() {
        return accessKeyId;
    }

    String secretAccessKey() {
        return secretAccessKey;
    }

    /** Null for long-lived keys. */
    String sessionToken() {
        return sessionToken;
    }

    int connectTimeoutMillis() {
        return connectTimeoutMillis;
    }

    int readTimeoutMillis() {
        return readTimeoutMillis;
    }

    int maxAttempts() {
        return maxAttempts;
    }

    @Override
    public boolean equals(Object other) {
        return other instanceof S3Connection that
                && Objects.equals(endpoint, that.endpoint)
                && region.equals(that.region)
                && accessKeyId.equals(that.accessKeyId)
                && secretAccessKey.equals(that.secretAccessKey)
                && Objects.equals(sessionToken, that.sessionToken)
                && pathStyle == that.pathStyle
                && connectTimeoutMillis == that.connectTimeoutMillis
                && readTimeoutMillis == that.readTimeoutMillis
                && maxAttempts == that.maxAttempts;
    }

    @Override
    public int hashCode() {
        return Objects.hash(endpoint, region, accessKeyId, secretAccessKey, sessionToken, pathStyle,
                connectTimeoutMillis, readTimeoutMillis, maxAttempts);
    }

    @Override
    public String toString() {
        return "S3Connection[endpoint=" + (endpoint == null ? "AWS" : endpoint)
                + ", region=" + region + ", accessKeyId=" + accessKeyId
                + ", sessionToken=" + (sessionToken == null ? "none" : "set")
                + ", pathStyle=" + pathStyle + ", connectTimeoutMillis=" + connectTimeoutMillis
                + ", readTimeoutMillis=" + readTimeoutMillis + ", maxAttempts=" + maxAttempts + "]";
    }

    private static String checkEndpoint(String endpoint) {
        URI uri;
        try {
            uri = new URI(endpoint);
        } catch (URISyntaxException e) {
            throw new IllegalArgumentException("the S3 endpoint is not a URL: " + endpoint, e);
        }
        boolean http = "http".equals(uri.getScheme()) || "https".equals(uri.getScheme());
        String path = uri.getRawPath();
        boolean bare = path == null || path.isEmpty() || path.equals("/");
        if (!http || uri.getHost() == null || !bare || uri.getRawQuery() != null) {
            throw new IllegalArgumentException(
                    "the S3 endpoint must be http(s)://host[:port], got " + endpoint);
        }
        return uri.getScheme() + "://" + uri.getRawAuthority();
    }

    private static String required(String value, String what) {
        if (value == null || value.isEmpty()) {
            throw new IllegalArgumentException("the S3 " + what + " is missing");
        }
        return value;
    }

    private static int positive(int value, String what) {
        if (value < 1) {
            throw new IllegalArgumentException(
                    "the S3 " + what + " must be positive, got " + value);
        }
        return value;
    }
}
