// A partition reassignment, what kafka-reassign-partitions does, through kafka-clients' Admin
// (confluent-kafka has no AlterPartitionReassignments). One shot: it asks the controller to
// move one partition to a list of brokers, then waits until the controller has no
// reassignment left for it and every broker of the list is in sync, and says so on one line:
//   done <ms> <replicas> <isr> <leader>   (broker ids, comma-separated)
//   E <NAME> <reason>                      (the error as Kafka's protocol names it)
// Arguments: bootstrap topic partition ids timeout_ms. Built by systems/jclient.py.
package brokerchaos;

import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewPartitionReassignment;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.protocol.Errors;

public final class KafkaReassign {
    private static final java.io.PrintStream OUT = System.out;

    private static void say(String line) {
        OUT.println(line);
        OUT.flush();
    }

    private static String ids(List<Node> nodes) {
        return nodes.stream().map(n -> Integer.toString(n.id())).collect(Collectors.joining(","));
    }

    private static TopicPartitionInfo describe(Admin admin, TopicPartition tp) throws Exception {
        TopicDescription d = admin.describeTopics(List.of(tp.topic())).allTopicNames().get(5, TimeUnit.SECONDS)
                .get(tp.topic());
        return d.partitions().get(tp.partition());
    }

    private static boolean settled(Admin admin, TopicPartition tp, List<Integer> want) throws Exception {
        if (!admin.listPartitionReassignments(Set.of(tp)).reassignments().get(5, TimeUnit.SECONDS).isEmpty()) {
            return false;
        }
        TopicPartitionInfo p = describe(admin, tp);
        List<Integer> replicas = p.replicas().stream().map(Node::id).collect(Collectors.toList());
        List<Integer> isr = p.isr().stream().map(Node::id).collect(Collectors.toList());
        return replicas.equals(want) && isr.containsAll(want);
    }

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("request.timeout.ms", "5000");
        props.put("default.api.timeout.ms", "10000");
        TopicPartition tp = new TopicPartition(args[1], Integer.parseInt(args[2]));
        List<Integer> want = java.util.Arrays.stream(args[3].split(",")).map(Integer::valueOf)
                .collect(Collectors.toList());
        long timeoutMs = Long.parseLong(args[4]);
        System.setOut(System.err);  // stdout is the answer alone
        long t0 = System.nanoTime();
        try (Admin admin = Admin.create(props)) {
            admin.alterPartitionReassignments(Map.of(tp, Optional.of(new NewPartitionReassignment(want))))
                    .all().get(timeoutMs, TimeUnit.MILLISECONDS);
            while (!settled(admin, tp, want)) {
                if ((System.nanoTime() - t0) / 1_000_000 > timeoutMs) {
                    throw new java.util.concurrent.TimeoutException("not settled within " + timeoutMs + " ms");
                }
                Thread.sleep(100);
            }
            TopicPartitionInfo p = describe(admin, tp);
            long ms = (System.nanoTime() - t0) / 1_000_000;
            String leader = p.leader() == null ? "-1" : Integer.toString(p.leader().id());
            say("done\t" + ms + "\t" + ids(p.replicas()) + "\t" + ids(p.isr()) + "\t" + leader);
        } catch (Exception e) {
            Throwable c = e instanceof ExecutionException && e.getCause() != null ? e.getCause() : e;
            say("E\t" + Errors.forException(c).name() + "\t"
                    + Protocol.clean(c.getClass().getSimpleName() + ": " + c.getMessage()));
            System.exit(1);
        }
    }
}
