// The Java client for Pulsar (org.apache.pulsar:pulsar-client-original), driven by the
// harness over stdin and stdout as KafkaBridge is (docs/java-clients.md); its transactions
// are what the Python client lacks. Built by systems/jclient.py against the Pulsar server
// set's jars.
package brokerchaos;

import java.nio.charset.StandardCharsets;
import java.util.Properties;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import org.apache.pulsar.PulsarVersion;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.MessageIdAdv;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.PulsarClientException;
import org.apache.pulsar.client.api.transaction.Transaction;

public final class PulsarBridge {
    private static volatile Transaction txn;  // the open transaction, if any

    private static void say(String line) {
        Protocol.say(line);
    }

    private static String clean(String s) {
        return Protocol.clean(s);
    }

    private static Throwable cause(Throwable e) {
        while ((e instanceof ExecutionException || e instanceof CompletionException) && e.getCause() != null) {
            e = e.getCause();
        }
        return e;
    }

    /** Name\treason: the exception's class, and what it says. */
    private static String error(Throwable e) {
        Throwable c = cause(e);
        return c.getClass().getSimpleName() + "\t" + clean(c.getMessage());
    }

    /** A commit or abort that timed out may be asked again; any other failure ends it. */
    private static String kind(Throwable e) {
        Throwable c = cause(e);
        return (c instanceof PulsarClientException.TimeoutException || c instanceof java.util.concurrent.TimeoutException)
                ? "retriable" : "abortable";
    }

    public static void main(String[] args) throws Exception {
        Protocol.open();
        Properties c = Protocol.load(args[0]);
        boolean txns = Boolean.parseBoolean(c.getProperty("transactions", "false"));
        if (txns) {
            // A broker loads a transaction coordinator (recovers its log) on a client's first
            // connect to it, and a client with transactions connects to all 16 as it is built:
            // with a busy core beside the suite they took over 10 s, and the run's client, built
            // with its operation timeout, gave up before its first send. A first client waits
            // for them (startTimeoutMs) and is closed; the run's client finds them loaded.
            PulsarClient.builder().serviceUrl(c.getProperty("serviceUrl"))
                    .operationTimeout(Integer.parseInt(c.getProperty("startTimeoutMs", "60000")), TimeUnit.MILLISECONDS)
                    .enableTransaction(true).build().close();
        }
        PulsarClient client = PulsarClient.builder().serviceUrl(c.getProperty("serviceUrl"))
                .operationTimeout(Integer.parseInt(c.getProperty("operationTimeoutMs", "10000")), TimeUnit.MILLISECONDS)
                .enableTransaction(txns).build();
        Producer<byte[]> p = client.newProducer().topic(c.getProperty("topic"))
                .producerName(c.getProperty("producerName"))
                // a transactional producer must have no send timeout (Pulsar refuses it otherwise)
                .sendTimeout(txns ? 0 : Integer.parseInt(c.getProperty("sendTimeoutMs")), TimeUnit.MILLISECONDS)
                .enableBatching(Boolean.parseBoolean(c.getProperty("batching")))
                .batchingMaxMessages(Integer.parseInt(c.getProperty("batchingMaxMessages")))
                .batchingMaxPublishDelay(Long.parseLong(c.getProperty("batchingMaxPublishDelayMs")), TimeUnit.MILLISECONDS)
                .maxPendingMessages(Integer.parseInt(c.getProperty("maxPendingMessages")))
                .blockIfQueueFull(false).create();
        long txnTimeoutMs = Long.parseLong(c.getProperty("txnTimeoutMs", "60000"));
        say("ready\t" + PulsarVersion.getVersion());
        Protocol.serve(new Protocol.Handler() {
            public void send(String id, String payload) {
                PulsarBridge.send(p, id, payload);
            }

            public void control(String op, String req, long timeoutMs) {
                PulsarBridge.control(client, p, op, req, timeoutMs, txnTimeoutMs);
            }
        });
        try {
            p.closeAsync().get(5, TimeUnit.SECONDS);
            client.closeAsync().get(5, TimeUnit.SECONDS);
        } catch (Exception e) {  // every outcome is recorded by now
        }
        Protocol.end("closed");
        System.exit(0);
    }

    private static void send(Producer<byte[]> p, String mid, String payload) {
        try {
            byte[] v = payload.getBytes(StandardCharsets.UTF_8);
            Transaction t = txn;
            CompletableFuture<MessageId> f = t == null ? p.sendAsync(v) : p.newMessage(t).value(v).sendAsync();
            f.whenComplete((m, e) -> {
                if (e == null) {
                    MessageIdAdv a = (MessageIdAdv) m;
                    Protocol.delivered(Long.parseLong(mid), a.getLedgerId(), a.getEntryId(), a.getPartitionIndex(),
                                       a.getBatchIndex());
                } else {
                    say("d\t" + mid + "\tE\t" + error(e));
                }
            });
        } catch (Exception e) {
            say("d\t" + mid + "\tE\t" + error(e));
        }
    }

    private static void control(PulsarClient client, Producer<byte[]> p, String op, String req, long timeoutMs,
                                long txnTimeoutMs) {
        try {
            if (op.equals("begin")) {
                txn = null;  // a begin that fails leaves none open: the sends after it fail
            }
            switch (op) {
                case "begin" -> txn = client.newTransaction().withTransactionTimeout(txnTimeoutMs, TimeUnit.MILLISECONDS)
                        .build().get(timeoutMs, TimeUnit.MILLISECONDS);
                case "commit" -> txn.commit().get(timeoutMs, TimeUnit.MILLISECONDS);
                case "abort" -> txn.abort().get(timeoutMs, TimeUnit.MILLISECONDS);
                case "flush" -> p.flushAsync().get(timeoutMs, TimeUnit.MILLISECONDS);
                case "init" -> { }
                default -> throw new IllegalArgumentException("unknown operation " + op);
            }
            say("r\t" + req + "\tok" + (op.equals("begin") ? "\t" + txn.getTxnID() : ""));
        } catch (Exception e) {
            say("r\t" + req + "\tE\t" + kind(e) + "\t" + error(e));
        }
    }
}
