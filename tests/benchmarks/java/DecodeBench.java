package tierlog.spark.read; // beside the reader: its splits and walker are package-private

import java.io.IOException;
import java.io.InputStream;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.apache.kafka.common.compress.Compression;
import org.apache.kafka.common.record.CompressionType;
import org.apache.kafka.common.record.RecordBatch;
import org.apache.kafka.common.utils.BufferSupplier;
import tierlog.spark.KafkaSchema;
import tierlog.spark.Planners;
import tierlog.spark.io.SegmentBytes;

/**
 * tests/benchmarks/pipeline_bench.py's decode figures, on one thread of a JVM of their own
 * (no Spark scheduler, no other work): the decode as a Spark task runs it, and the codec
 * alone on the same batches, so their ratio says what decoding costs beyond decompression;
 * and the reading alone (the batches found in the segment files, nothing decompressed).
 *
 * <p>Usage: {@code DecodeBench <plan.json> <runs>}. The decode is {@link ColumnarSplitReader}
 * over every split of the plan with every column of {@code select *} (headers excluded, the
 * default), reading the segment files as a task does. The codec alone is every v2 batch's
 * records section of the same splits, read into memory beforehand, decompressed by Kafka's
 * own codec classes (its LZ4 frame over lz4-java, zstd-jni) into one reused buffer; nothing
 * is parsed. All three are warmed up first (the JIT), then run in turn; the answer is one
 * JSON object of thread CPU and wall seconds per run.
 */
public final class DecodeBench {
    private static final int WARM_UP_RUNS = 5;
    private static final ThreadMXBean THREADS = ManagementFactory.getThreadMXBean();

    private DecodeBench() {}

    public static void main(String[] args) throws IOException {
        InputSplit[] splits = SplitPlan.parse(Planners.JSON.readTree(Files.readString(Path.of(args[0]))));
        int runs = Integer.parseInt(args[1]);
        List<Section> sections = compressedSections(splits);
        byte[] into = new byte[1 << 20];
        BufferSupplier buffers = BufferSupplier.create();
        long records = 0;
        for (int i = 0; i < WARM_UP_RUNS; i++) {
            records = decode(splits);
            into = decompress(sections, into, buffers);
            read(splits);
        }
        List<double[]> decodeRuns = new ArrayList<>();
        List<double[]> codecRuns = new ArrayList<>();
        List<double[]> readRuns = new ArrayList<>();
        for (int i = 0; i < runs; i++) {
            long[] started = now();
            decode(splits);
            decodeRuns.add(since(started));
            started = now();
            into = decompress(sections, into, buffers);
            codecRuns.add(since(started));
            started = now();
            read(splits);
            readRuns.add(since(started));
        }
        System.out.println(Planners.JSON.writeValueAsString(java.util.Map.of(
                "records", records,
                "compressed_batches", sections.size(),
                "decode", decodeRuns,
                "codec", codecRuns,
                "read", readRuns)));
    }

    /** Every row of every split, as a Spark task decodes them; returns how many. */
    private static long decode(InputSplit[] splits) throws IOException {
        long rows = 0;
        for (InputSplit split : splits) {
            try (ColumnarSplitReader reader = new ColumnarSplitReader(split, KafkaSchema.of(false))) {
                while (reader.next()) {
                    rows += reader.get().numRows();
                }
            }
        }
        return rows;
    }

    /** Every batch of every split found in its segment file, as a task reads them; nothing decoded. */
    private static void read(InputSplit[] splits) throws IOException {
        for (InputSplit split : splits) {
            try (SegmentBytes bytes = split.source().open()) {
                BatchWalker walker = new BatchWalker(
                        bytes, split.source().name(), split.startPosition(), split.endPosition());
                while (walker.next() != null) {
                    // the walk is the work
                }
            }
        }
    }

    /** A compressed v2 batch's records section and its codec. */
    private record Section(ByteBuffer bytes, CompressionType codec) {}

    private static List<Section> compressedSections(InputSplit[] splits) throws IOException {
        List<Section> sections = new ArrayList<>();
        for (InputSplit split : splits) {
            try (SegmentBytes bytes = split.source().open()) {
                BatchWalker walker = new BatchWalker(
                        bytes, split.source().name(), split.startPosition(), split.endPosition());
                BatchWalker.Found found;
                while ((found = walker.next()) != null) {
                    ByteBuffer batch = found.bytes();
                    int codecId = batch.getShort(BatchHeader.MAGIC_OFFSET + 5) & 0x07;
                    if (found.header().magic() != 2 || codecId == 0) {
                        continue;
                    }
                    ByteBuffer section = ByteBuffer.allocate(batch.limit() - BatchHeader.V2_HEADER_SIZE);
                    section.put(batch.position(BatchHeader.V2_HEADER_SIZE)).flip();
                    sections.add(new Section(section, CompressionType.forId(codecId)));
                }
            }
        }
        return sections;
    }

    /** Every section decompressed into {@code into} (grown when short); returns it. */
    private static byte[] decompress(List<Section> sections, byte[] into, BufferSupplier buffers)
            throws IOException {
        for (Section section : sections) {
            Compression codec = Compression.of(section.codec()).build();
            try (InputStream stream = codec.wrapForInput(section.bytes().duplicate(), RecordBatch.MAGIC_VALUE_V2, buffers)) {
                int length = 0;
                int read;
                while ((read = stream.read(into, length, into.length - length)) > 0) {
                    length += read;
                    if (length == into.length) {
                        into = java.util.Arrays.copyOf(into, into.length * 2);
                    }
                }
            }
        }
        return into;
    }

    private static long[] now() {
        return new long[] {THREADS.getCurrentThreadCpuTime(), System.nanoTime()};
    }

    /** {@code [cpu seconds, wall seconds]} since {@code started}. */
    private static double[] since(long[] started) {
        long[] ended = now();
        return new double[] {(ended[0] - started[0]) / 1e9, (ended[1] - started[1]) / 1e9};
    }
}
