package tierlog.spark.io;

import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.util.HexFormat;
import java.util.Map;
import java.util.SortedMap;
import java.util.stream.Collectors;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

/**
 * AWS Signature Version 4 for S3, as pure functions of the request and the keys.
 *
 * <p>Spark's classpath has no AWS SDK, and the reader only ever sends signed GETs, so the
 * signing is written here rather than pulled in: a canonical request (method, URI-encoded
 * path, query, the signed headers, the payload's SHA-256), a string to sign (algorithm,
 * time, scope, the canonical request's hash), and an HMAC-SHA256 with a key derived from
 * the secret through the date, region and service. Nothing here does I/O or reads a
 * clock, so each step can be checked against the published example.
 */
public final class SigV4 {
    /** SHA-256 of the empty body: what a GET signs as its payload. */
    public static final String EMPTY_PAYLOAD_SHA256 =
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    private static final String ALGORITHM = "AWS4-HMAC-SHA256";
    private static final HexFormat HEX = HexFormat.of();

    private SigV4() {}

    /**
     * The {@code Authorization} header's value.
     *
     * @param headers every header to sign, names in lower case (at least {@code host} and
     *     {@code x-amz-date}); sorted, as the canonical request lists them
     * @param amzDate the request time as {@code x-amz-date} carries it, {@code yyyyMMddTHHmmssZ}
     */
    public static String authorization(
            String method,
            String canonicalUri,
            String canonicalQuery,
            SortedMap<String, String> headers,
            String payloadSha256,
            String accessKeyId,
            String secretAccessKey,
            String region,
            String service,
            String amzDate) {
        String scope = scope(amzDate, region, service);
        String request =
                canonicalRequest(method, canonicalUri, canonicalQuery, headers, payloadSha256);
        String toSign = stringToSign(amzDate, scope, sha256Hex(request));
        byte[] key = signingKey(secretAccessKey, amzDate.substring(0, 8), region, service);
        String signature = HEX.formatHex(hmacSha256(key, toSign));
        return ALGORITHM + " Credential=" + accessKeyId + "/" + scope
                + ",SignedHeaders=" + signedHeaders(headers) + ",Signature=" + signature;
    }

    /** Method, path, query, {@code name:value} lines, the signed names, the payload hash. */
    public static String canonicalRequest(
            String method,
            String canonicalUri,
            String canonicalQuery,
            SortedMap<String, String> headers,
            String payloadSha256) {
        StringBuilder text = new StringBuilder();
        text.append(method).append('\n');
        text.append(canonicalUri).append('\n');
        text.append(canonicalQuery).append('\n');
        for (Map.Entry<String, String> header : headers.entrySet()) {
            // Values trimmed, inner runs of spaces as one, as the canonical form asks.
            String value = header.getValue().strip().replaceAll(" +", " ");
            text.append(header.getKey()).append(':').append(value).append('\n');
        }
        text.append('\n').append(signedHeaders(headers)).append('\n');
        return text.append(payloadSha256).toString();
    }

    public static String stringToSign(String amzDate, String scope, String canonicalRequestSha256) {
        return ALGORITHM + "\n" + amzDate + "\n" + scope + "\n" + canonicalRequestSha256;
    }

    /** {@code date/region/service/aws4_request}: what the signature is valid for. */
    public static String scope(String amzDate, String region, String service) {
        return amzDate.substring(0, 8) + "/" + region + "/" + service + "/aws4_request";
    }

    /** The secret, chained through HMACs of the date, region, service and terminator. */
    public static byte[] signingKey(
            String secretAccessKey, String date, String region, String service) {
        byte[] key = hmacSha256(("AWS4" + secretAccessKey).getBytes(StandardCharsets.UTF_8), date);
        key = hmacSha256(key, region);
        key = hmacSha256(key, service);
        return hmacSha256(key, "aws4_request");
    }

    /**
     * An object key as the canonical URI (and the request line) carry it: every UTF-8 byte
     * outside {@code A-Z a-z 0-9 - _ . ~} as {@code %XX} in upper-case hex, each {@code /}
     * kept. S3 wants the key encoded once, never normalised ({@code a//b} and {@code ./}
     * stay as they are).
     */
    public static String encodeKey(String key) {
        StringBuilder encoded = new StringBuilder(key.length() + 16);
        for (byte b : key.getBytes(StandardCharsets.UTF_8)) {
            int c = b & 0xff;
            if (isUnreserved(c) || c == '/') {
                encoded.append((char) c);
            } else {
                encoded.append('%').append(Character.toUpperCase(Character.forDigit(c >> 4, 16)))
                        .append(Character.toUpperCase(Character.forDigit(c & 0xf, 16)));
            }
        }
        return encoded.toString();
    }

    public static String sha256Hex(String text) {
        try {
            MessageDigest digest = MessageDigest.getInstance("SHA-256");
            return HEX.formatHex(digest.digest(text.getBytes(StandardCharsets.UTF_8)));
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("every Java platform has SHA-256", e);
        }
    }

    private static String signedHeaders(SortedMap<String, String> headers) {
        return headers.keySet().stream().collect(Collectors.joining(";"));
    }

    private static boolean isUnreserved(int c) {
        return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')
                || c == '-' || c == '_' || c == '.' || c == '~';
    }

    private static byte[] hmacSha256(byte[] key, String data) {
        try {
            Mac mac = Mac.getInstance("HmacSHA256");
            mac.init(new SecretKeySpec(key, "HmacSHA256"));
            return mac.doFinal(data.getBytes(StandardCharsets.UTF_8));
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("every Java platform has HmacSHA256", e);
        }
    }
}
