package org.slf4j;

/** Hands out the dropping logger. */
public final class LoggerFactory {
    private static final Logger LOGGER = new Logger();

    private LoggerFactory() { }

    public static Logger getLogger(Class<?> klass) {
        return LOGGER;
    }
}
