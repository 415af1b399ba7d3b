"""Function handlers on a real daemon: results, process groups, config and preload, the README example."""
