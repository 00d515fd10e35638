package tierlog.spark.io;

import java.net.ProtocolException;
import java.net.http.HttpResponse;
import java.nio.ByteBuffer;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.Flow;

/**
 * The body of one ranged GET, copied straight into a buffer of the asked length.
 *
 * <p>It refuses a body longer than asked (the server ignored the range) instead of
 * growing, and it notes when bytes last arrived: {@code java.net.http} times out only the
 * wait for the headers, so {@link S3Ranges} watches this to end an attempt whose body
 * stalls half way, as a hung server's does. A body shorter than asked completes with the
 * bytes it had; the caller decides what that means.
 */
final class RangeBody implements HttpResponse.BodySubscriber<ByteBuffer> {
    private final ByteBuffer bytes;
    private final CompletableFuture<ByteBuffer> result = new CompletableFuture<>();
    private volatile long lastArrivalNanos; // 0 until the answer's headers came
    private Flow.Subscription subscription;

    RangeBody(int length) {
        this.bytes = ByteBuffer.allocate(length);
    }

    /** {@link System#nanoTime()} when the headers or the latest bytes came, or 0 before. */
    long lastArrivalNanos() {
        return lastArrivalNanos;
    }

    @Override
    public void onSubscribe(Flow.Subscription subscription) {
        lastArrivalNanos = System.nanoTime();
        this.subscription = subscription;
        subscription.request(Long.MAX_VALUE);
    }

    @Override
    public void onNext(List<ByteBuffer> items) {
        lastArrivalNanos = System.nanoTime();
        for (ByteBuffer item : items) {
            if (item.remaining() > bytes.remaining()) {
                subscription.cancel();
                result.completeExceptionally(new ProtocolException(
                        "the server sent more than the " + bytes.capacity() + " bytes asked for"));
                return;
            }
            bytes.put(item);
        }
    }

    @Override
    public void onError(Throwable error) {
        result.completeExceptionally(error);
    }

    @Override
    public void onComplete() {
        result.complete(bytes.flip());
    }

    @Override
    public CompletionStage<ByteBuffer> getBody() {
        return result;
    }
}
