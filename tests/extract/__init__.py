"""Tests of tender_pool.extract: readers, Markdown, the JVM driver, the corpus."""
