package org.apache.kafka.common.record;

/** What protocol.types names of Kafka's record batches; the assignors never read one. */
public interface BaseRecords {
    int sizeInBytes();
}
