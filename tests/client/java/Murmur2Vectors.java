// Test vectors for tierlog.client.partitioner, printed by Apache Kafka's own code.
//
//   java -cp '.cache/tools/kafka-4.1.1/libs/*' tests/client/java/Murmur2Vectors.java
//
// prints a header line, then one tab-separated line per key:
//   key (hex, "-" for the empty key) | Utils.murmur2(key) | Utils.toPositive(murmur2) |
//   BuiltInPartitioner.partitionForKey(key, n) for each n in PARTITION_COUNTS (comma-separated)
// Its output is committed as tests/client/murmur2_vectors.tsv; an interop test re-runs this
// program against the jars and compares.
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Random;

import org.apache.kafka.clients.producer.internals.BuiltInPartitioner;
import org.apache.kafka.common.utils.Utils;

public class Murmur2Vectors {
    static final int[] PARTITION_COUNTS = {1, 2, 3, 7, 10, 12, 64, 100, 1000, 2147483647};

    public static void main(String[] args) {
        List<byte[]> keys = new ArrayList<>();
        keys.add(new byte[0]);
        for (String text : new String[] {
                "a", "ab", "abc", "abcd", "abcde", "abcdef", "abcdefg", "abcdefgh", "key", "key-1",
                "key-2", "user-42", "order:2024-01-01:000017", "tierlog", "The quick brown fox jumps over the lazy dog",
                "héllo wörld", "日本語のキー", "\uD83D\uDE80 emoji"}) {
            keys.add(text.getBytes(StandardCharsets.UTF_8));
        }
        // Bytes with the high bit set: murmur2 reads them as signed Java bytes.
        keys.add(new byte[] {(byte) 0xff});
        keys.add(new byte[] {(byte) 0x80, 0x7f});
        keys.add(new byte[] {(byte) 0xff, (byte) 0xfe, (byte) 0xfd});
        keys.add(new byte[] {(byte) 0x80, (byte) 0x80, (byte) 0x80, (byte) 0x80});
        keys.add(new byte[] {0, 0, 0, 0, 0});
        // Every length from 1 to 40 (each tail length many times), fixed pseudo-random bytes.
        Random random = new Random(0x7132106L);
        for (int length = 1; length <= 40; length++) {
            byte[] key = new byte[length];
            random.nextBytes(key);
            keys.add(key);
        }
        // Big-endian integers, as an IntegerSerializer or LongSerializer writes them.
        for (long value : new long[] {0, 1, -1, 42, 1000000007L, Long.MIN_VALUE, Long.MAX_VALUE}) {
            keys.add(java.nio.ByteBuffer.allocate(8).putLong(value).array());
            keys.add(java.nio.ByteBuffer.allocate(4).putInt((int) value).array());
        }
        StringBuilder header = new StringBuilder("key_hex\tmurmur2\tpositive\tpartitions:");
        for (int i = 0; i < PARTITION_COUNTS.length; i++) {
            header.append(i == 0 ? "" : ",").append(PARTITION_COUNTS[i]);
        }
        System.out.println(header);
        HexFormat hex = HexFormat.of();
        for (byte[] key : keys) {
            StringBuilder line = new StringBuilder(key.length == 0 ? "-" : hex.formatHex(key));
            int hash = Utils.murmur2(key);
            line.append('\t').append(hash).append('\t').append(Utils.toPositive(hash)).append('\t');
            for (int i = 0; i < PARTITION_COUNTS.length; i++) {
                line.append(i == 0 ? "" : ",").append(BuiltInPartitioner.partitionForKey(key, PARTITION_COUNTS[i]));
            }
            System.out.println(line);
        }
    }
}
