package org.apache.kafka.common.utils;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.List;

/** The few methods of Kafka's Utils that the client assignors and protocol types call (the real class
 *  pulls in Kafka's network and config layers). */
public final class Utils {
    private Utils() { }

    public static <T extends Comparable<? super T>> List<T> sorted(Collection<T> collection) {
        List<T> out = new ArrayList<>(collection);
        Collections.sort(out);
        return Collections.unmodifiableList(out);
    }

    public static <T> T newInstance(Class<T> c) {
        try {
            return c.getDeclaredConstructor().newInstance();
        } catch (ReflectiveOperationException e) {
            throw new RuntimeException(e);
        }
    }

    public static <T> Class<? extends T> loadClass(String klass, Class<T> base) throws ClassNotFoundException {
        return Class.forName(klass, true, Utils.class.getClassLoader()).asSubclass(base);
    }

    public static byte[] utf8(String string) {
        return string.getBytes(StandardCharsets.UTF_8);
    }

    public static String utf8(ByteBuffer buffer, int length) {
        byte[] bytes = new byte[length];
        buffer.duplicate().get(bytes);
        return new String(bytes, StandardCharsets.UTF_8);
    }

    public static int utf8Length(CharSequence s) {
        return s.toString().getBytes(StandardCharsets.UTF_8).length;
    }
}
