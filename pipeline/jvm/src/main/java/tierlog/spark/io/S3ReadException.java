package tierlog.spark.io;

import java.io.IOException;

/**
 * A ranged read that failed for good: S3 refused it, the object is shorter than the
 * range, or every attempt failed. Carries S3's answer so a caller can tell a missing
 * object ({@code NoSuchKey}) from a refusal ({@code AccessDenied}) without parsing text.
 */
public final class S3ReadException extends IOException {
    private static final long serialVersionUID = 1L;

    private final int statusCode;
    private final String errorCode;

    S3ReadException(String message, int statusCode, String errorCode, Throwable cause) {
        super(message, cause);
        this.statusCode = statusCode;
        this.errorCode = errorCode;
    }

    /** The HTTP status of the last answer, or 0 if the last attempt got none. */
    public int statusCode() {
        return statusCode;
    }

    /** S3's error code of the last answer ({@code NoSuchKey}, {@code SlowDown}...), or "". */
    public String errorCode() {
        return errorCode;
    }
}
