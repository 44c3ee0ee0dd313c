package org.apache.kafka.common.record;

import java.nio.ByteBuffer;

/** What protocol.types names of Kafka's record batches; the assignors never read one. */
public final class MemoryRecords implements BaseRecords {
    private final ByteBuffer buffer;

    private MemoryRecords(ByteBuffer buffer) {
        this.buffer = buffer;
    }

    public static MemoryRecords readableRecords(ByteBuffer buffer) {
        return new MemoryRecords(buffer);
    }

    public ByteBuffer buffer() {
        return buffer.duplicate();
    }

    @Override
    public int sizeInBytes() {
        return buffer.limit();
    }
}
