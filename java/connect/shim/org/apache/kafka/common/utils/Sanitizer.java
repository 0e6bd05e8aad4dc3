package org.apache.kafka.common.utils;

/**
 * Kafka 4.x moved {@code Sanitizer} to {@code org.apache.kafka.common.utils.internals}; Debezium
 * 3.5 and 3.6 still call it here (io.debezium.metrics.Metrics, io.debezium.pipeline.JmxUtils),
 * so their source connectors fail in a Connect 4.4 worker at task start with
 * NoClassDefFoundError. Put in a plugin's folder (benchmarks/kafka.py compiles it into the
 * Debezium MariaDB connector's), the plugin's class loader finds it after the worker's.
 */
public final class Sanitizer {
    private Sanitizer() {
    }

    public static String sanitize(String name) {
        return org.apache.kafka.common.utils.internals.Sanitizer.sanitize(name);
    }

    public static String desanitize(String name) {
        return org.apache.kafka.common.utils.internals.Sanitizer.desanitize(name);
    }

    public static String jmxSanitize(String name) {
        return org.apache.kafka.common.utils.internals.Sanitizer.jmxSanitize(name);
    }
}
