package org.slf4j;

/** A logger that drops everything (as slf4j without a binding does). */
public final class Logger {
    public boolean isDebugEnabled() { return false; }
    public void trace(String format, Object... args) { }
    public void debug(String format, Object... args) { }
    public void info(String format, Object... args) { }
    public void warn(String format, Object... args) { }
    public void error(String format, Object... args) { }
}
