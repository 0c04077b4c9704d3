// Prints, for each hex key on standard input, the partition Kafka's own producer picks for it among
// each partition count given as an argument (BuiltInPartitioner.partitionForKey, murmur2): the
// reference mm2py's partitioner is checked against (tests/integration/test_progress_partitions.py).
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.HexFormat;
import org.apache.kafka.clients.producer.internals.BuiltInPartitioner;

public class PartitionForKey {
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        StringBuilder out = new StringBuilder();
        for (String line; (line = in.readLine()) != null; ) {
            byte[] key = HexFormat.of().parseHex(line.trim());
            for (int i = 0; i < args.length; i++) {
                if (i > 0) out.append(' ');
                out.append(BuiltInPartitioner.partitionForKey(key, Integer.parseInt(args[i])));
            }
            out.append('\n');
        }
        System.out.print(out);
    }
}
