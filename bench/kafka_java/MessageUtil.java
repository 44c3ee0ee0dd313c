package org.apache.kafka.common.protocol;

/** The two constants protocol.types.Struct imports from Kafka's MessageUtil. */
public final class MessageUtil {
    public static final long UNSIGNED_INT_MAX = 4294967295L;
    public static final int UNSIGNED_SHORT_MAX = 65535;

    private MessageUtil() { }
}
