package org.apache.kafka.clients.consumer;

import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.Subscription;
import org.apache.kafka.clients.consumer.internals.AbstractPartitionAssignor;
import org.apache.kafka.clients.consumer.internals.AbstractStickyAssignor;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;

/**
 * One case of groupshift's bench.assignors on Kafka's own assignors, in this fresh JVM: the same
 * topics, members and subscriptions, timed around assignPartitions as Kafka's
 * AbstractStickyAssignorTest large tests call it. A "-owned" case times the second call, after
 * members 1..N-1 report the first call's result (generation 1) as buildSubscriptionV2Above does.
 * Prints: case, wall seconds, the calling thread's CPU seconds, the process's CPU seconds (with the
 * JIT compiler's and the collector's threads).
 */
public final class AssignorBench {
    private AssignorBench() { }

    public static void main(String[] args) {
        String name = args[0];
        String[] parts = name.split("-");
        String assignorName = parts[0];
        String shape = parts[1];
        boolean owned = parts.length > 2;
        boolean halves = shape.equals("halves");
        int topicCount = halves ? 100 : 500;
        int partitionCount = halves ? 200 : 2000;
        int memberCount = halves ? 500 : 2000;
        List<String> topics = new ArrayList<>();
        Map<String, List<PartitionInfo>> partitionsPerTopic = new HashMap<>();
        for (int i = 0; i < topicCount; i++) {
            String topic = String.format("t%03d", i);
            topics.add(topic);
            List<PartitionInfo> infos = new ArrayList<>();
            for (int p = 0; p < partitionCount; p++)
                infos.add(new PartitionInfo(topic, p, null, new Node[0], new Node[0]));
            partitionsPerTopic.put(topic, infos);
        }
        Map<String, List<String>> topicsOf = new LinkedHashMap<>();
        for (int i = 0; i < memberCount; i++) {
            List<String> mine = topics;
            if (halves)
                mine = i % 4 == 0 ? topics.subList(0, topicCount / 2) : topics.subList(topicCount / 2, topicCount);
            else if (shape.equals("nonequal") && i == memberCount - 1)
                mine = topics.subList(0, 1);
            topicsOf.put(String.format(halves ? "c%03d" : "c%04d", i), mine);
        }
        Map<String, Subscription> subscriptions = new HashMap<>();
        topicsOf.forEach((member, mine) -> subscriptions.put(member, new Subscription(
            mine, null, Collections.emptyList(), AbstractStickyAssignor.DEFAULT_GENERATION, Optional.empty())));
        AbstractPartitionAssignor assignor;
        switch (assignorName) {
            case "range": assignor = new RangeAssignor(); break;
            case "roundrobin": assignor = new RoundRobinAssignor(); break;
            case "sticky": assignor = new StickyAssignor(); break;
            case "coop": assignor = new CooperativeStickyAssignor(); break;
            default: throw new IllegalArgumentException("unknown assignor in case " + name);
        }
        if (owned) {
            Map<String, List<TopicPartition>> first = assignor.assignPartitions(partitionsPerTopic, subscriptions);
            boolean skip = true;
            for (Map.Entry<String, List<String>> e : topicsOf.entrySet()) {
                if (skip) {
                    skip = false;
                    continue;
                }
                List<TopicPartition> mine = first.get(e.getKey());
                subscriptions.put(e.getKey(), new Subscription(e.getValue(),
                    StickyAssignor.serializeTopicPartitionAssignment(new AbstractStickyAssignor.MemberData(mine, Optional.of(1))),
                    mine, 1, Optional.empty()));
            }
        }
        ThreadMXBean threads = ManagementFactory.getThreadMXBean();
        com.sun.management.OperatingSystemMXBean os =
            (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
        long process = os.getProcessCpuTime();
        long thread = threads.getCurrentThreadCpuTime();
        long start = System.nanoTime();
        Map<String, List<TopicPartition>> result = assignor.assignPartitions(partitionsPerTopic, subscriptions);
        long wall = System.nanoTime() - start;
        thread = threads.getCurrentThreadCpuTime() - thread;
        process = os.getProcessCpuTime() - process;
        int assigned = result.values().stream().mapToInt(List::size).sum();
        System.out.printf("%-24s wall %6.3f s  thread cpu %6.3f s  process cpu %6.3f s  (%d assigned)%n",
            name, wall / 1e9, thread / 1e9, process / 1e9, assigned);
    }
}
