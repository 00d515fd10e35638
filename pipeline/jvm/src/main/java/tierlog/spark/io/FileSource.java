package tierlog.spark.io;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;

/**
 * A segment's log in a local file: a log dir's {@code .log} ({@code base} 0), or the log part
 * of a {@code file://} tier's segment object, which starts {@code base} bytes into it. Opened
 * read-only: the log may belong to a running broker.
 */
public record FileSource(String path, long base, String name) implements SegmentSource {
    private static final long serialVersionUID = 1L;

    @Override
    public SegmentBytes open() throws IOException {
        return new FileBytes(FileChannel.open(Path.of(path), StandardOpenOption.READ), base);
    }

    /** Positioned reads into one buffer, grown to the largest read asked for. */
    private static final class FileBytes implements SegmentBytes {
        private final FileChannel channel;
        private final long base;
        private ByteBuffer buffer = ByteBuffer.allocate(0);

        FileBytes(FileChannel channel, long base) {
            this.channel = channel;
            this.base = base;
        }

        @Override
        public ByteBuffer read(long position, int length) throws IOException {
            if (buffer.capacity() < length) {
                buffer = ByteBuffer.allocate(length);
            }
            buffer.clear().limit(length);
            while (buffer.hasRemaining()) {
                if (channel.read(buffer, base + position + buffer.position()) < 0) {
                    break;
                }
            }
            return buffer.flip();
        }

        @Override
        public void close() throws IOException {
            channel.close();
        }
    }
}
