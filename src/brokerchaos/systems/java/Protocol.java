// The line protocol both bridges speak (docs/java-clients.md): stdout is the protocol alone,
// one tab-separated line per answer; stdin is read line by line until `x` or its end.
package brokerchaos;

import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.Properties;

final class Protocol {
    interface Handler {
        void send(String id, String payload);

        void control(String op, String req, long timeoutMs);
    }

    private static PrintStream out;
    // lines wait here for the writer thread, which writes what has gathered at once: one
    // write and flush per batch, not per line (the producer's I/O thread never blocks on it)
    private static final StringBuilder pending = new StringBuilder();
    private static final Object writing = new Object();

    private Protocol() {
    }

    /** The protocol's stdout kept; whatever logs to System.out goes to stderr (the log). */
    static void open() {
        out = new PrintStream(new FileOutputStream(FileDescriptor.out), false, StandardCharsets.UTF_8);
        System.setOut(System.err);
        Thread w = new Thread(Protocol::writeLoop, "protocol-writer");
        w.setDaemon(true);
        w.start();
    }

    static void say(String line) {
        synchronized (pending) {
            pending.append(line).append('\n');
            pending.notify();
        }
    }

    private static void writeLoop() {
        try {
            while (true) {
                synchronized (pending) {
                    while (pending.length() == 0) {
                        pending.wait();
                    }
                }
                writeOut();
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /** What has gathered, written in the order said (taken and written under one lock). */
    private static void writeOut() {
        synchronized (writing) {
            String chunk;
            synchronized (pending) {
                chunk = pending.toString();
                pending.setLength(0);
            }
            if (!chunk.isEmpty()) {
                out.print(chunk);
                out.flush();
            }
        }
    }

    /** The last line said, and everything before it written, before the process ends. */
    static void end(String line) {
        say(line);
        writeOut();
    }

    static String clean(String s) {
        return s == null ? "" : s.replace('\t', ' ').replace('\n', ' ');
    }

    static Properties load(String path) throws IOException {
        Properties p = new Properties();
        try (FileInputStream in = new FileInputStream(path)) {
            p.load(in);
        }
        return p;
    }

    /** `s <id> <payload>` to send, `<op> <req> <timeout ms>` to call, `x` (or the end) to stop. */
    static void serve(Handler h) throws IOException {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8), 1 << 16);
        String line;
        while ((line = in.readLine()) != null) {
            String[] f = line.split("\t", 3);
            if (f[0].equals("x")) {
                return;
            }
            if (f[0].equals("s")) {
                h.send(f[1], f[2]);
            } else {
                h.control(f[0], f[1], Long.parseLong(f[2]));
            }
        }
    }
}
