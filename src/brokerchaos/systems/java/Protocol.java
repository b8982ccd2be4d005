// The protocol both bridges speak (docs/java-clients.md): stdin is read line by line until
// `x` or its end; stdout is the protocol alone: tab-separated text lines, and a delivered
// send's answer as a record of a binary block (`B`, the fields per record, the records'
// count, then each record's id and fields as little-endian longs), parsed in bulk.
package brokerchaos;

import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.FileDescriptor;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.Properties;

final class Protocol {
    interface Handler {
        void send(String id, String payload);

        void control(String op, String req, long timeoutMs);
    }

    private static OutputStream out;
    // what was said waits here for the writer thread, which writes what has gathered at once:
    // one write and flush per batch, not per answer (the producer's I/O thread never blocks on
    // it). Deliveries gather in `block` until a text line or the write closes it.
    private static final ByteArrayOutputStream pending = new ByteArrayOutputStream(1 << 16);
    private static ByteBuffer block = ByteBuffer.allocate(1 << 16).order(ByteOrder.LITTLE_ENDIAN);
    private static int blockCount = 0;
    private static int blockFields = 0;
    private static final Object writing = new Object();

    private Protocol() {
    }

    /** The protocol's stdout kept; whatever logs to System.out goes to stderr (the log). */
    static void open() {
        out = new FileOutputStream(FileDescriptor.out);
        System.setOut(System.err);
        Thread w = new Thread(Protocol::writeLoop, "protocol-writer");
        w.setDaemon(true);
        w.start();
    }

    static void say(String line) {
        synchronized (pending) {
            closeBlock();
            pending.writeBytes((line + "\n").getBytes(StandardCharsets.UTF_8));
            pending.notify();
        }
    }

    /** Send `id` delivered, at the place `fields` name (Kafka: partition, offset): one record. */
    static void delivered(long id, long... fields) {
        synchronized (pending) {
            if (blockCount > 0 && blockFields != fields.length) {
                closeBlock();
            }
            int size = 8 * (1 + fields.length);
            if (block.remaining() < size) {
                ByteBuffer bigger = ByteBuffer.allocate(2 * block.capacity() + size).order(ByteOrder.LITTLE_ENDIAN);
                block.flip();
                bigger.put(block);
                block = bigger;
            }
            block.putLong(id);
            for (long f : fields) {
                block.putLong(f);
            }
            blockFields = fields.length;
            blockCount++;
            pending.notify();
        }
    }

    /** The gathered records into `pending` as one block (under its lock). */
    private static void closeBlock() {
        if (blockCount == 0) {
            return;
        }
        ByteBuffer head = ByteBuffer.allocate(6).order(ByteOrder.LITTLE_ENDIAN);
        head.put((byte) 'B').put((byte) blockFields).putInt(blockCount);
        pending.write(head.array(), 0, 6);
        pending.write(block.array(), 0, block.position());
        block.clear();
        blockCount = 0;
    }

    private static void writeLoop() {
        try {
            while (true) {
                synchronized (pending) {
                    while (pending.size() == 0 && blockCount == 0) {
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
            byte[] chunk;
            synchronized (pending) {
                closeBlock();
                chunk = pending.toByteArray();
                pending.reset();
            }
            if (chunk.length > 0) {
                try {
                    out.write(chunk);
                    out.flush();
                } catch (IOException e) {  // the harness is gone: nothing is left to tell
                }
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
