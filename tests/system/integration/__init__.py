"""parse_markdown through the daemon: inline results, the JVM under status, the whole extraction path."""
