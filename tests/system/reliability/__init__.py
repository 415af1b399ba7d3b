"""Redis topologies and partitions: Sentinel, failover, cluster, the fence, raw producers, full disks."""
