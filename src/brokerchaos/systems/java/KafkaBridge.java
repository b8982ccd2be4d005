// The Java client for Kafka (org.apache.kafka:kafka-clients), driven by the harness over
// stdin and stdout: one tab-separated line per operation and per outcome
// (docs/java-clients.md). Built by systems/jclient.py against the Kafka server set's jars.
package brokerchaos;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Properties;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.errors.AuthorizationException;
import org.apache.kafka.common.errors.OutOfOrderSequenceException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.RetriableException;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.errors.UnsupportedVersionException;
import org.apache.kafka.common.protocol.Errors;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class KafkaBridge {
    private static void say(String line) {
        Protocol.say(line);
    }

    /** The kafka-clients release, by reflection: AppInfoParser moved to common.utils.internals in 4.4. */
    private static String clientVersion() {
        for (String name : new String[] {"org.apache.kafka.common.utils.AppInfoParser",
                                         "org.apache.kafka.common.utils.internals.AppInfoParser"}) {
            try {
                return (String) Class.forName(name).getMethod("getVersion").invoke(null);
            } catch (ReflectiveOperationException e) {
                // the other name
            }
        }
        return "unknown";
    }

    private static String clean(String s) {
        return Protocol.clean(s);
    }

    /** NAME\treason: the error as Kafka's protocol names it, and the exception. */
    private static String error(Throwable e) {
        Throwable c = (e instanceof KafkaException && e.getCause() instanceof KafkaException) ? e.getCause() : e;
        return Errors.forException(c).name() + "\t" + clean(c.getClass().getSimpleName() + ": " + c.getMessage());
    }

    /** How a transactional call's failure is to be taken: fatal (a new producer), abortable, retriable. */
    private static String kind(Throwable e) {
        if (e instanceof ProducerFencedException || e instanceof OutOfOrderSequenceException
                || e instanceof UnsupportedVersionException || e instanceof AuthorizationException
                || e instanceof IllegalStateException) {
            return "fatal";
        }
        if (e instanceof TimeoutException || e instanceof RetriableException) {
            return "retriable";
        }
        return "abortable";
    }

    public static void main(String[] args) throws Exception {
        Protocol.open();
        Properties props = Protocol.load(args[0]);
        String topic = args[1];
        KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(props, new ByteArraySerializer(), new ByteArraySerializer());
        Thread leader = new Thread(() -> followLeader(p, topic), "leader");
        leader.setDaemon(true);
        leader.start();
        say("ready\t" + clientVersion());
        Protocol.serve(new Protocol.Handler() {
            public void send(String id, String payload) {
                KafkaBridge.send(p, topic, id, payload);
            }

            public void control(String op, String req, long timeoutMs) {
                KafkaBridge.control(p, op, req, timeoutMs);
            }
        });
        close(p);
        Protocol.end("closed");
    }

    /** close within 5 s: close(Duration) from kafka-clients 2.2, close(long, TimeUnit) before
     *  it (and gone in 4.0), whichever the client release in hand has (options.client_version). */
    private static void close(KafkaProducer<byte[], byte[]> p) {
        try {
            KafkaProducer.class.getMethod("close", Duration.class).invoke(p, Duration.ofSeconds(5));
        } catch (NoSuchMethodException e) {
            try {
                KafkaProducer.class.getMethod("close", long.class, java.util.concurrent.TimeUnit.class)
                        .invoke(p, 5L, java.util.concurrent.TimeUnit.SECONDS);
            } catch (ReflectiveOperationException e2) {
                throw new IllegalStateException(e2);
            }
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException(e);
        }
    }

    private static void send(KafkaProducer<byte[], byte[]> p, String topic, String id, String payload) {
        try {
            p.send(new ProducerRecord<>(topic, payload.getBytes(StandardCharsets.UTF_8)), (md, e) -> {
                if (e == null) {
                    Protocol.delivered(Long.parseLong(id), md.partition(), md.offset());
                } else {
                    say("d\t" + id + "\tE\t" + error(e));
                }
            });
        } catch (Exception e) {  // refused before it was handed over (not in a transaction, closed)
            say("d\t" + id + "\tE\t" + error(e));
        }
    }

    /** A blocking call of the transactional API (or flush), answered `r <req> ok` or `r <req> E kind NAME reason`. */
    private static void control(KafkaProducer<byte[], byte[]> p, String op, String req, long timeoutMs) {
        try {
            switch (op) {
                case "init" -> p.initTransactions();
                case "begin" -> p.beginTransaction();
                case "commit" -> p.commitTransaction();
                case "abort" -> p.abortTransaction();
                case "flush" -> p.flush();
                default -> throw new IllegalArgumentException("unknown operation " + op);
            }
            say("r\t" + req + "\tok");
        } catch (Exception e) {
            say("r\t" + req + "\tE\t" + kind(e) + "\t" + error(e));
        }
    }

    /** The leader of the topic's first partition as the client's metadata names it, on each change. */
    private static void followLeader(KafkaProducer<byte[], byte[]> p, String topic) {
        String last = "";
        while (true) {
            try {
                List<PartitionInfo> parts = p.partitionsFor(topic);
                for (PartitionInfo pi : parts) {
                    if (pi.partition() == 0 && pi.leader() != null && !pi.leader().isEmpty()) {
                        Node n = pi.leader();
                        String now = n.host() + "\t" + n.port();
                        if (!now.equals(last)) {
                            say("l\t" + now);
                            last = now;
                        }
                    }
                }
                Thread.sleep(200);
            } catch (InterruptedException e) {
                return;
            } catch (Exception e) {  // closed, or no metadata yet: look again
                try {
                    Thread.sleep(200);
                } catch (InterruptedException ie) {
                    return;
                }
            }
        }
    }
}
