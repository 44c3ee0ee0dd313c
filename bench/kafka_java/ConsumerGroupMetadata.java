package org.apache.kafka.clients.consumer;

/** The assignors only read a generation from it in onAssignment, which the benchmark does not call. */
public final class ConsumerGroupMetadata {
    public int generationId() {
        return -1;
    }
}
